"""The learned stage of skill linking: a logistic reranker over a query's candidate concepts.

For one query (a skill mention in its sentence, or a whole sentence) the resolver gathers
candidate concepts (nearest labels of the mention and of the sentence, exact label matches)
and describes each by a few numbers (`FEATURES`): how close the mention and the sentence are to
the concept's labels, in meaning (MiniLM cosine) and in spelling (rapidfuzz), whether the
mention *is* one of its labels, how many of the mention's words (stemmed) a label shares, the
cosine of the mention after a learned linear adapter (`QueryAdapter`), and how each ranks among
the candidates. A logistic model turns those into the probability that the concept is meant
(Platt-scaled); those probabilities rank the candidates, and an acceptance model (`AcceptanceModel`)
reads the ranking's shape for the `confidence` a Resolution carries. Three models, same features,
one per kind of query: "mention" (a mention with its sentence), "bare_mention" (a mention alone,
as skill_entities sends today) and "sentence" (the sentence is the query). A model may instead be a
`RankerModel` (one hidden layer, trained listwise; the trainer's `--models ranker`), read from the
same JSON by its "type".

Trained by `python -m training.train_skill_linker` on data that knows no benchmark answers
(ESCO's own labels and descriptions, SkillSpan train spans that are ESCO labels, O*NET technology
examples; issue 43, docs/skill-linking.md); the weights and their card (every source of a positive
and of a prior count, licences, hyper-parameters, the held-out selection) ship as
`plugins/postings/skills/models/skill_linker.json`. NumPy only: twenty weights need no framework.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = (
    "cos_mention",  # best cosine of the mention to one of the concept's labels
    "cos_mention_gap",  # that minus the best candidate's (how far from the top)
    "cos_preferred",  # cosine of the mention to the preferred label
    "cos_context",  # best cosine of the sentence to one of the concept's labels
    "cos_context_gap",
    "cos_concept",  # cosine of the mention to the concept's mean label vector (its meaning overall)
    "cos_concept_context",  # cosine of the sentence to it
    "fuzzy",  # best rapidfuzz similarity (0-1) of the mention to one of the labels
    "fuzzy_gap",
    "exact",  # the mention is the concept's preferred label
    "alt_label",  # the mention is one of its alternative labels
    "log_rank_mention",  # log(1 + rank) among the candidates, by cos_mention
    "log_rank_context",  # log(1 + rank) by cos_context
    "log_prior",  # log(1 + how often the concept is asked for: ESCO occupations that list it, O*NET
    # occupations and SkillSpan train spans that name one of its labels; `LinkerModel.concept_prior`)
    "stem_jaccard",  # best Jaccard overlap of the mention's content-word stems with a label's
    "stem_cover",  # best share of the mention's content-word stems found in one label
    "head_match",  # the mention's last content word (stemmed) is in one of the labels
    "label_words",  # log(1 + words of the preferred label)
    "cos_adapted",  # best cosine of the adapted mention vector (see `QueryAdapter`) to a label
    "cos_adapted_gap",  # that minus the best candidate's
)
QUERY_KINDS = ("mention", "bare_mention", "sentence")
# What the acceptance model (`AcceptanceModel`) reads of one query's ranking, best candidate first.
# The best candidate's own probability enters through its share and the mass (their product); its
# logit is left out, as a fitted negative weight on it made a near-certain answer less sure.
ACCEPTANCE_FEATURES = (
    "logit_second",  # logit of the runner-up's (a close second makes the best one doubtful)
    "log_top_share",  # log of the best one's share of the ten best probabilities
    "log_top_mass",  # log of those ten probabilities' sum (many plausible candidates, or none)
    "top_exact",  # the query is the best candidate's preferred label
    "top_alt_label",  # one of its alternative labels
)
# What an acceptance model may also read of the best candidate itself (its reranker features, by
# name; the model's stored feature list says whether it does): how close the mention is to it in
# meaning and in spelling, and whether the embedding's and the spelling's nearest concept agree with
# the reranker's choice (a gap of 0: the best candidate is also the nearest by that signal). Issue 43,
# fourth round: chosen on held-out independent pairs (`train_skill_linker.fit_acceptance`).
ACCEPTANCE_TOP_FEATURES = (
    "cos_mention",
    "cos_mention_gap",
    "cos_context_gap",
    "fuzzy",
    "fuzzy_gap",
    "stem_cover",
    "log_rank_mention",
)
TOP_COLUMNS = tuple(FEATURES.index(name) for name in ACCEPTANCE_TOP_FEATURES)
ACCEPTANCE_DEPTH = 10
DEFAULT_MODEL_PATH = Path(__file__).with_name("models") / "skill_linker.json"
# The taxonomy whose concepts `LinkerModel.concept_prior` counts (ESCO's).
PRIOR_TAXONOMY_URI_PREFIX = "http://data.europa.eu/esco/"


@dataclass(frozen=True)
class CandidateSignals:
    """Per-candidate raw signals, aligned arrays; `features()` turns them into the model's inputs."""

    cos_mention: np.ndarray
    cos_preferred: np.ndarray
    cos_context: np.ndarray
    cos_concept: np.ndarray
    cos_concept_context: np.ndarray
    fuzzy: np.ndarray
    tier: np.ndarray  # 2: exact preferred label, 1: alternative label, 0: neither
    prior: np.ndarray  # how often the concept is asked for (see `LinkerModel.concept_prior`)
    stem_jaccard: np.ndarray
    stem_cover: np.ndarray
    head_match: np.ndarray
    label_words: np.ndarray
    cos_adapted: np.ndarray  # without an adapter: cos_mention

    def features(self) -> np.ndarray:
        """One row per candidate, columns in `FEATURES` order."""
        rank_mention = np.argsort(np.argsort(-self.cos_mention, kind="stable"), kind="stable")
        rank_context = np.argsort(np.argsort(-self.cos_context, kind="stable"), kind="stable")
        return np.stack(
            [
                self.cos_mention,
                self.cos_mention - self.cos_mention.max(),
                self.cos_preferred,
                self.cos_context,
                self.cos_context - self.cos_context.max(),
                self.cos_concept,
                self.cos_concept_context,
                self.fuzzy,
                self.fuzzy - self.fuzzy.max(),
                (self.tier == 2).astype(np.float32),
                (self.tier == 1).astype(np.float32),
                np.log1p(rank_mention),
                np.log1p(rank_context),
                np.log1p(self.prior),
                self.stem_jaccard,
                self.stem_cover,
                self.head_match,
                np.log1p(self.label_words),
                self.cos_adapted,
                self.cos_adapted - self.cos_adapted.max(),
            ],
            axis=1,
        ).astype(np.float64)


def platt_probabilities(platt: tuple[float, float], logits: np.ndarray) -> np.ndarray:
    """Platt-scaled logits: the calibrated probability that a candidate is meant (what ranks candidates)."""
    a, b = platt
    return 1.0 / (1.0 + np.exp(-(a * logits + b)))


def trained_features(data: dict[str, Any], prefix_allowed: bool) -> list[str]:
    """The features a stored model was trained on; an error naming the fix when this code computes
    others (`prefix_allowed`: a model trained before later features were added may still load)."""
    trained_on = list(data["features"])
    expected = list(FEATURES[: len(trained_on)]) if prefix_allowed else list(FEATURES)
    if trained_on != expected:
        raise ValueError(
            f"the linker model was trained on features {trained_on}, this code computes "
            f"{list(FEATURES)}: retrain it (python -m training.train_skill_linker)"
        )
    return trained_on


@dataclass(frozen=True)
class LogisticModel:
    """Standardized features -> logit -> Platt scaling (a * logit + b) -> probability."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    platt: tuple[float, float] = (1.0, 0.0)

    def logits(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.mean) / self.scale) @ self.weights + self.bias

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        return platt_probabilities(self.platt, self.logits(features))

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(FEATURES),
            "mean": self.mean.round(6).tolist(),
            "scale": self.scale.round(6).tolist(),
            "weights": self.weights.round(6).tolist(),
            "bias": round(float(self.bias), 6),
            "platt": [round(float(v), 6) for v in self.platt],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogisticModel:
        trained_on = trained_features(data, prefix_allowed=True)
        # A model trained before the later features were added gives them weight 0.
        return cls.from_arrays(data, missing=len(FEATURES) - len(trained_on))

    @classmethod
    def from_arrays(cls, data: dict[str, Any], missing: int = 0) -> LogisticModel:
        """The stored numbers, `missing` trailing features padded with weight 0 (features unchecked)."""
        return cls(
            np.concatenate([np.asarray(data["mean"], np.float64), np.zeros(missing)]),
            np.concatenate([np.asarray(data["scale"], np.float64), np.ones(missing)]),
            np.concatenate([np.asarray(data["weights"], np.float64), np.zeros(missing)]),
            float(data["bias"]),
            (float(data["platt"][0]), float(data["platt"][1])),
        )


def fit_logistic(
    features: np.ndarray, labels: np.ndarray, l2: float = 1e-3, weights: np.ndarray | None = None
) -> LogisticModel:
    """L2-regularized logistic regression by Newton's method (a dozen features: converges in ~10 steps).

    weights: one per row (mean 1; None: all 1), so the training data can stand for another mix of
    concepts than the one it was sampled from (the trainer's popularity weighting)."""
    row_weights = np.ones(len(labels)) if weights is None else np.asarray(weights, np.float64)
    total = row_weights.sum()
    mean = (features * row_weights[:, None]).sum(axis=0) / total
    scale = np.sqrt((((features - mean) ** 2) * row_weights[:, None]).sum(axis=0) / total) + 1e-6
    design = np.hstack([(features - mean) / scale, np.ones((len(features), 1))])
    coefficients = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(100):
        probabilities = 1.0 / (1.0 + np.exp(-design @ coefficients))
        gradient = design.T @ (row_weights * (probabilities - labels)) / total + penalty * coefficients
        curvature = row_weights * probabilities * (1 - probabilities)
        hessian = (design * curvature[:, None]).T @ design / total + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        coefficients -= step
        if np.abs(step).max() < 1e-7:
            break
    return LogisticModel(mean, scale, coefficients[:-1], float(coefficients[-1]))


def fit_listwise_logistic(
    features: np.ndarray,
    labels: np.ndarray,
    starts: np.ndarray,
    l2: float = 1e-3,
    query_weights: np.ndarray | None = None,
) -> LogisticModel:
    """A linear scorer fitted listwise (conditional logit): per query (rows `starts[q]` to the next
    start, each with at least one gold row), minimise -log of the softmax mass on its gold candidates,
    so the fit is about the order within a query and not about each candidate alone. Damped Newton
    steps with the softmax's covariance as curvature (exact for one gold row). The bias is 0: Platt
    scaling on held-out queries (`fit_platt`) makes the scores probabilities."""
    queries = len(starts)
    weights_q = np.ones(queries) if query_weights is None else np.asarray(query_weights, np.float64)
    group = np.repeat(np.arange(queries), np.diff(np.append(starts, len(labels))))
    row_weights = weights_q[group]
    total = row_weights.sum()
    mean = (features * row_weights[:, None]).sum(axis=0) / total
    scale = np.sqrt((((features - mean) ** 2) * row_weights[:, None]).sum(axis=0) / total) + 1e-6
    design = (features - mean) / scale
    gold = labels > 0
    coefficients = np.zeros(design.shape[1])
    norm = weights_q.sum()

    def loss_of(w: np.ndarray) -> float:
        scores = design @ w
        top = np.maximum.reduceat(scores, starts)[group]
        e = np.exp(scores - top)
        all_mass = np.add.reduceat(e, starts)
        gold_mass = np.add.reduceat(e * gold, starts)
        return float((weights_q * (np.log(all_mass) - np.log(gold_mass))).sum() / norm + 0.5 * l2 * w @ w)

    loss = loss_of(coefficients)
    for _ in range(50):
        scores = design @ coefficients
        top = np.maximum.reduceat(scores, starts)[group]
        e = np.exp(scores - top)
        p = e / np.add.reduceat(e, starts)[group]
        eg = e * gold
        r = eg / np.add.reduceat(eg, starts)[group]
        expected = np.add.reduceat(design * p[:, None], starts, axis=0)
        observed = np.add.reduceat(design * r[:, None], starts, axis=0)
        gradient = (weights_q[:, None] * (expected - observed)).sum(axis=0) / norm + l2 * coefficients
        curvature = (design * (p * row_weights)[:, None]).T @ design - (
            expected * weights_q[:, None]
        ).T @ expected
        hessian = curvature / norm + np.diag(np.full(len(coefficients), l2 + 1e-9))
        step = np.linalg.solve(hessian, gradient)
        size = 1.0
        while size > 1e-4:
            candidate = coefficients - size * step
            new_loss = loss_of(candidate)
            if new_loss <= loss:
                break
            size /= 2
        else:
            break
        coefficients, moved, loss = candidate, float(np.abs(size * step).max()), new_loss
        if moved < 1e-7:
            break
    return LogisticModel(mean, scale, coefficients, 0.0)


def fit_platt(
    logits: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """Platt scaling (a, b) fitted on held-out logits, so confidences match observed frequencies there
    (weights: one per row, as in `fit_logistic`). Fitted on the standardized logits with halving
    Newton steps (a listwise scorer's logits have no fixed offset or scale: plain Newton from (1, 0)
    could run away), then mapped back to the raw logits."""
    row_weights = np.ones(len(labels)) if weights is None else np.asarray(weights, np.float64)
    total = row_weights.sum()
    centre = float((logits * row_weights).sum() / total)
    spread = float(np.sqrt((((logits - centre) ** 2) * row_weights).sum() / total)) or 1.0
    design = np.stack([(logits - centre) / spread, np.ones_like(logits)], axis=1)

    def loss_of(c: np.ndarray) -> float:
        z = design @ c
        return float((row_weights * (np.logaddexp(0.0, z) - labels * z)).sum() / total)

    coefficients = np.array([1.0, 0.0])
    loss = loss_of(coefficients)
    for _ in range(100):
        probabilities = 1.0 / (1.0 + np.exp(-design @ coefficients))
        gradient = design.T @ (row_weights * (probabilities - labels)) / total
        curvature = row_weights * probabilities * (1 - probabilities)
        hessian = (design * curvature[:, None]).T @ design / total
        step = np.linalg.solve(hessian + 1e-9 * np.eye(2), gradient)
        size = 1.0
        while size > 1e-6 and loss_of(coefficients - size * step) > loss:
            size /= 2
        coefficients = coefficients - size * step
        loss = loss_of(coefficients)
        if np.abs(size * step).max() < 1e-9:
            break
    a = coefficients[0] / spread
    return float(a), float(coefficients[1] - a * centre)


@dataclass(frozen=True)
class RankerModel:
    """A one-hidden-layer scorer: standardized features z -> z.linear + tanh(z W + c).out + bias -> Platt.

    Trained listwise (softmax over a query's candidates) together with a pointwise logistic term
    (`fit_ranker`), so its scores both order one query's candidates and stay comparable across
    queries (sentence-level linking merges the candidates of several queries by confidence).
    """

    mean: np.ndarray
    scale: np.ndarray
    linear: np.ndarray  # features
    hidden: np.ndarray  # features x units
    hidden_bias: np.ndarray  # units
    out: np.ndarray  # units
    bias: float
    platt: tuple[float, float] = (1.0, 0.0)

    def logits(self, features: np.ndarray) -> np.ndarray:
        z = (features - self.mean) / self.scale
        return z @ self.linear + np.tanh(z @ self.hidden + self.hidden_bias) @ self.out + self.bias

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        return platt_probabilities(self.platt, self.logits(features))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "ranker",
            "features": list(FEATURES),
            "mean": self.mean.round(6).tolist(),
            "scale": self.scale.round(6).tolist(),
            "linear": self.linear.round(6).tolist(),
            "hidden": self.hidden.round(6).tolist(),
            "hidden_bias": self.hidden_bias.round(6).tolist(),
            "out": self.out.round(6).tolist(),
            "bias": round(float(self.bias), 6),
            "platt": [round(float(v), 6) for v in self.platt],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankerModel:
        trained_features(data, prefix_allowed=False)
        return cls(
            np.asarray(data["mean"], np.float64),
            np.asarray(data["scale"], np.float64),
            np.asarray(data["linear"], np.float64),
            np.asarray(data["hidden"], np.float64).reshape(len(FEATURES), -1),
            np.asarray(data["hidden_bias"], np.float64),
            np.asarray(data["out"], np.float64),
            float(data["bias"]),
            (float(data["platt"][0]), float(data["platt"][1])),
        )


Reranker = LogisticModel | RankerModel


def acceptance_features(
    probabilities: np.ndarray, tiers: np.ndarray, top: np.ndarray | None = None
) -> np.ndarray:
    """One row of `ACCEPTANCE_FEATURES` from a query's ranking (probabilities best first, label tiers
    aligned; not empty: `LinkerModel.top_confidence` answers an empty ranking itself); with `top`, the
    best candidate's reranker feature row (`FEATURES` order), followed by its `ACCEPTANCE_TOP_FEATURES`."""
    clipped = np.clip(np.asarray(probabilities[:ACCEPTANCE_DEPTH], np.float64), 1e-6, 1 - 1e-6)
    mass = float(clipped.sum())
    top_tier = int(tiers[0])
    shape = [
        np.log(clipped[1] / (1 - clipped[1])) if len(clipped) > 1 else np.log(1e-6),
        np.log(clipped[0] / mass),
        np.log(mass),
        float(top_tier == 2),
        float(top_tier == 1),
    ]
    if top is not None:
        shape += [float(top[column]) for column in TOP_COLUMNS]
    return np.array([shape])


@dataclass(frozen=True)
class AcceptanceModel:
    """The probability that a query's best candidate is right, from the shape of its ranking.

    A reranker scores each candidate on its own; whether to answer at all also depends on the others
    (a runner-up almost as likely makes the best one doubtful). A logistic model over
    `ACCEPTANCE_FEATURES` (and, when `reads_top`, the best candidate's `ACCEPTANCE_TOP_FEATURES`),
    trained on held-out training pairs (`train_skill_linker`): its output is the `confidence` of a
    resolved mention and what the "unmatched" threshold is set on.
    """

    scorer: LogisticModel
    reads_top: bool = False

    @property
    def features(self) -> list[str]:
        return [*ACCEPTANCE_FEATURES, *(f"top_{n}" for n in ACCEPTANCE_TOP_FEATURES if self.reads_top)]

    def confidence(
        self, probabilities: np.ndarray, tiers: np.ndarray, top: np.ndarray | None = None
    ) -> float:
        if self.reads_top and top is None:
            raise ValueError("this acceptance model reads the best candidate's features: pass `top`")
        row = acceptance_features(probabilities, tiers, top if self.reads_top else None)
        return float(self.scorer.probabilities(row)[0])

    def to_dict(self) -> dict[str, Any]:
        return {**self.scorer.to_dict(), "features": self.features}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AcceptanceModel:
        for reads_top in (False, True):
            if list(data["features"]) == cls(LogisticModel.from_arrays(data), reads_top).features:
                return cls(LogisticModel.from_arrays(data), reads_top)
        raise ValueError(
            f"the linker's acceptance model was trained on {data['features']}, this code computes "
            f"{list(ACCEPTANCE_FEATURES)} (and optionally the best candidate's "
            f"{list(ACCEPTANCE_TOP_FEATURES)}): retrain it (python -m training.train_skill_linker)"
        )


def reranker_from_dict(data: dict[str, Any]) -> Reranker:
    """A model of either type from its JSON form (a model without "type" is logistic)."""
    return RankerModel.from_dict(data) if data.get("type") == "ranker" else LogisticModel.from_dict(data)


@dataclass(frozen=True)
class RankerData:
    """Candidates of many queries, standardized, grouped by query (rows of a query are contiguous)."""

    features: np.ndarray
    labels: np.ndarray
    starts: np.ndarray  # first row of each query
    group: np.ndarray  # query of each row

    @classmethod
    def of(cls, features: list[np.ndarray], labels: list[np.ndarray]) -> RankerData:
        sizes = np.array([len(f) for f in features])
        keep = sizes > 0
        features = [f for f, k in zip(features, keep, strict=True) if k]
        labels = [y for y, k in zip(labels, keep, strict=True) if k]
        sizes = sizes[keep]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return cls(
            np.vstack(features).astype(np.float64),
            np.concatenate(labels).astype(np.float64),
            starts,
            np.repeat(np.arange(len(sizes)), sizes),
        )


def _ranker_loss(
    model: RankerModel, data: RankerData, listwise: float, pointwise: float, want_gradient: bool = True
) -> tuple[float, dict[str, np.ndarray]]:
    """Listwise loss (-log of the softmax mass on a query's gold candidates, mean over queries with
    one) plus `pointwise` times the mean logistic loss per candidate; gradients by hand."""
    z = (data.features - model.mean) / model.scale
    h = np.tanh(z @ model.hidden + model.hidden_bias)
    s = z @ model.linear + h @ model.out + model.bias
    top = np.maximum.reduceat(s, data.starts)
    e = np.exp(s - top[data.group])
    p = e / np.add.reduceat(e, data.starts)[data.group]
    mass = np.add.reduceat(p * data.labels, data.starts)
    has_gold = mass > 0
    queries = max(int(has_gold.sum()), 1)
    loss = listwise * float(-np.log(mass[has_gold]).sum() / queries)
    loss += pointwise * float(np.mean(np.logaddexp(0.0, s) - data.labels * s))
    sigmoid = 0.5 * (1.0 + np.tanh(0.5 * s))
    if not want_gradient:
        return loss, {}
    rowmass = mass[data.group]
    d_list = np.where(rowmass > 0, p - p * data.labels / np.where(rowmass > 0, rowmass, 1.0), 0.0)
    ds = listwise * d_list / queries + pointwise * (sigmoid - data.labels) / len(s)
    dh = np.outer(ds, model.out) * (1 - h**2)
    return loss, {
        "linear": z.T @ ds,
        "hidden": z.T @ dh,
        "hidden_bias": dh.sum(axis=0),
        "out": h.T @ ds,
        "bias": np.array(ds.sum()),
    }


def fit_ranker(
    train: RankerData,
    dev: RankerData,
    units: int = 16,
    listwise: float = 1.0,
    pointwise: float = 1.0,
    l2: float = 1e-4,
    steps: int = 400,
    learning_rate: float = 0.02,
    seed: int = 17,
    columns: list[int] | None = None,
) -> tuple[RankerModel, list[dict[str, float]]]:
    """`RankerModel` by full-batch Adam on `_ranker_loss`; the step with the lowest dev loss is kept
    (checked every 20 steps). `columns`: the features used (the others get zero weights)."""
    rng = np.random.default_rng(seed)
    count = train.features.shape[1]
    used = np.zeros(count, bool)
    used[list(range(count)) if columns is None else columns] = True
    mean = np.where(used, train.features.mean(axis=0), 0.0)
    scale = np.where(used, train.features.std(axis=0) + 1e-6, 1.0)
    params = {
        "linear": np.zeros(count),
        "hidden": rng.normal(0, 0.3, (count, units)) * used[:, None],
        "hidden_bias": np.zeros(units),
        "out": rng.normal(0, 0.1, units),
        "bias": np.array(0.0),
    }
    mask = {"linear": used.astype(float), "hidden": used[:, None].astype(float)}
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}

    def model_of(p: dict[str, np.ndarray]) -> RankerModel:
        return RankerModel(
            mean, scale, p["linear"], p["hidden"], p["hidden_bias"], p["out"], float(p["bias"])
        )

    best = model_of({k: v.copy() for k, v in params.items()})
    best_loss = _ranker_loss(best, dev, listwise, pointwise, want_gradient=False)[0]
    history = [{"step": 0, "dev_loss": round(best_loss, 5)}]
    for step in range(1, steps + 1):
        loss, grads = _ranker_loss(model_of(params), train, listwise, pointwise)
        for name, grad in grads.items():
            if name in ("linear", "hidden", "out"):
                grad = grad + l2 * params[name]
            grad = grad * mask.get(name, 1.0)
            m, v = moments[name]
            m[...] = 0.9 * m + 0.1 * grad
            v[...] = 0.999 * v + 0.001 * grad**2
            params[name] = params[name] - learning_rate * (m / (1 - 0.9**step)) / (
                np.sqrt(v / (1 - 0.999**step)) + 1e-8
            )
        if step % 20 == 0 or step == steps:
            candidate = model_of({k: v.copy() for k, v in params.items()})
            dev_loss = _ranker_loss(candidate, dev, listwise, pointwise, want_gradient=False)[0]
            history.append({"step": step, "train_loss": round(loss, 5), "dev_loss": round(dev_loss, 5)})
            if dev_loss < best_loss:
                best, best_loss = candidate, dev_loss
    return best, history


@dataclass(frozen=True)
class QueryAdapter:
    """A linear map of mention vectors towards the labels they name: q -> unit(q + U (V^T q)).

    Low rank (U, V: dimension x rank) over the frozen encoder; read from older model files (the
    current trainer trains none); label vectors stay as they are, so the label index serves both.
    The identity when absent.
    """

    up: np.ndarray  # U
    down: np.ndarray  # V

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        adapted = vectors + (vectors @ self.down) @ self.up.T
        norms = np.linalg.norm(adapted, axis=-1, keepdims=True)
        return (adapted / np.where(norms == 0, 1.0, norms)).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"up": self.up.round(5).tolist(), "down": self.down.round(5).tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueryAdapter:
        return cls(np.asarray(data["up"], np.float32), np.asarray(data["down"], np.float32))


@dataclass(frozen=True)
class LinkerModel:
    """The three reranking models, the confidence below which resolve() answers "unmatched", the card,
    how often each concept (by preferred label) is asked for (a prior, from sources independent of
    any benchmark), and the acceptance model that turns a ranking into that confidence (without one:
    the best candidate's probability)."""

    models: dict[str, Reranker]
    threshold: float
    card: dict[str, Any]
    # preferred label -> how often the concept is asked for, counted from sources independent of any
    # benchmark (training/independent_data.independent_prior; the card names them)
    concept_prior: dict[str, int] = field(default_factory=dict)
    adapter: QueryAdapter | None = None
    acceptance: AcceptanceModel | None = None
    prior_taxonomy: str = PRIOR_TAXONOMY_URI_PREFIX  # URI prefix of the concepts the prior counts
    trained_concepts: tuple[str, ...] = ()  # URIs of the concepts that were positives in training
    prior_parts: dict[str, list[int]] = field(default_factory=dict)  # label -> count per prior source
    prior_part_names: tuple[str, ...] = ()  # the sources, in `prior_parts` order
    # A learned linear map (dimension x dimension) applied to every vector the linker compares, label
    # and query alike (`ConceptProjection`); None: the encoder's vectors as they are.
    projection: ConceptProjection | None = None

    def model(self, kind: str) -> Reranker:
        return self.models[kind]

    def prior_count(self, concept_uri: str, preferred_label: str) -> float:
        """The prior's count for a concept. It was counted on ESCO: there, a concept it leaves out is one
        no source names (0). A concept of another taxonomy (the demo's, a user's own) that it does
        not know by label has no count at all, so it gets the median: with 0 for every
        concept, the linker left 74% of Decorte spans unmatched instead of 49% (docs/benchmarks.md)."""
        count = self.concept_prior.get(preferred_label)
        if count is not None:
            return float(count)
        return 0.0 if concept_uri.startswith(self.prior_taxonomy) else self._median_count

    @cached_property
    def _median_count(self) -> float:
        return float(np.median(list(self.concept_prior.values()))) if self.concept_prior else 0.0

    def top_confidence(
        self, probabilities: np.ndarray, tiers: np.ndarray, top: np.ndarray | None = None
    ) -> float:
        """How sure the linker is that the best candidate of this ranking is right (`top`: the best
        candidate's reranker features, needed by an acceptance model that reads them)."""
        if not len(probabilities):
            return 0.0
        if self.acceptance is None:
            return float(probabilities[0])
        return self.acceptance.confidence(probabilities, tiers, top)

    def to_json(self) -> str:
        return json.dumps(
            {
                "card": self.card,
                "threshold": self.threshold,
                "models": {kind: model.to_dict() for kind, model in self.models.items()},
                "concept_prior": dict(sorted(self.concept_prior.items())),
                "adapter": self.adapter.to_dict() if self.adapter is not None else None,
                "acceptance": self.acceptance.to_dict() if self.acceptance is not None else None,
                "trained_concepts": list(self.trained_concepts),
                "concept_prior_parts": {
                    "sources": list(self.prior_part_names),
                    "counts": dict(sorted(self.prior_parts.items())),
                },
                "projection": self.projection.reference() if self.projection is not None else None,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> LinkerModel:
        data = json.loads(text)
        missing = [kind for kind in QUERY_KINDS if kind not in data.get("models", {})]
        if missing:
            raise ValueError(f"the linker model has no {', '.join(missing)} model")
        models = {kind: reranker_from_dict(data["models"][kind]) for kind in QUERY_KINDS}
        prior = {str(label): int(count) for label, count in data.get("concept_prior", {}).items()}
        adapter = QueryAdapter.from_dict(data["adapter"]) if data.get("adapter") else None
        acceptance = AcceptanceModel.from_dict(data["acceptance"]) if data.get("acceptance") else None
        parts = data.get("concept_prior_parts") or {}
        return cls(
            models,
            float(data["threshold"]),
            dict(data.get("card", {})),
            prior,
            adapter,
            acceptance,
            trained_concepts=tuple(data.get("trained_concepts", ())),
            prior_parts={str(k): [int(v) for v in counts] for k, counts in parts.get("counts", {}).items()},
            prior_part_names=tuple(parts.get("sources", ())),
        )


def load_linker_model(path: Path | None = None) -> LinkerModel:
    """The shipped (or given) linker model, read once per process and path."""
    return _load_linker_model(Path(path or DEFAULT_MODEL_PATH).resolve())


@lru_cache(maxsize=4)
def _load_linker_model(path: Path) -> LinkerModel:
    if not path.is_file():
        raise FileNotFoundError(
            f"skill linker model not found: {path} (train it: python -m training.train_skill_linker)"
        )
    text = path.read_text(encoding="utf-8")
    model = LinkerModel.from_json(text)
    reference = json.loads(text).get("projection")
    if not reference:
        return model
    projection = replace(
        ConceptProjection.load(path.parent / reference["file"]), use=reference.get("use", "space")
    )
    return replace(model, projection=projection)


@dataclass(frozen=True)
class ConceptProjection:
    """A linear map over the frozen encoder's unit vectors, v -> unit(v @ matrix), trained contrastively so
    a mention lands near the labels of the concept it names (`training/train_linking_projection.py`).

    Applied to queries and labels alike, so a label still finds itself (cosine 1) and the label index is
    built over projected label vectors: the encoder still runs once a posting (issue 61's shared
    encoding), the projection is one matrix product per query and one per taxonomy load. `name` (the
    .npz file next to the model JSON) is part of the label index's cache key through the vectors.
    """

    matrix: np.ndarray  # dimension x dimension, float32
    name: str = "projection.npz"
    # "space": every vector the linker compares is projected (the label index too); "feature": the
    # encoder's vectors stay as they are and the projected cosine is one more reranker feature
    # (`cos_adapted`), so candidates and every other feature are the unprojected ones
    use: str = "space"

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        projected = np.asarray(vectors, np.float32) @ self.matrix
        norms = np.linalg.norm(projected, axis=-1, keepdims=True)
        return (projected / np.where(norms == 0, 1.0, norms)).astype(np.float32)

    def reference(self) -> dict[str, Any]:
        return {"file": self.name, "shape": list(self.matrix.shape), "use": self.use}

    def save(self, folder: Path) -> Path:
        """Stored as float16 (147k numbers, ~0.3 MB): the cosines it changes are far coarser."""
        path = Path(folder) / self.name
        np.savez_compressed(path, matrix=self.matrix.astype(np.float16))
        return path

    @classmethod
    def load(cls, path: Path) -> ConceptProjection:
        with np.load(path) as stored:
            return cls(stored["matrix"].astype(np.float32), Path(path).name)
