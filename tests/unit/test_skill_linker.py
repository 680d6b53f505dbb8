"""The learned linker: the shipped model, its threshold, the sentence as context, sentence-level linking."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline_defs import settings as settings_module
from plugins.postings.skills import concept_reranker
from plugins.postings.skills.concept_reranker import (
    ACCEPTANCE_FEATURES,
    ACCEPTANCE_TOP_FEATURES,
    DEFAULT_MODEL_PATH,
    FEATURES,
    PRIOR_TAXONOMY_URI_PREFIX,
    AcceptanceModel,
    ConceptProjection,
    LinkerModel,
    QueryAdapter,
    RankerData,
    RankerModel,
    _ranker_loss,
    fit_listwise_logistic,
    fit_ranker,
    load_linker_model,
)
from plugins.postings.skills.embeddings import (
    MINILM_INSTALL_HINT,
    MINILM_PACKAGE,
    MiniLMEmbeddings,
    RememberingEmbeddings,
)
from plugins.postings.skills.resolution_figures import resolution_figures
from plugins.postings.skills.skill_resolver import SkillResolver, TaxonomyLabelEntry
from plugins.postings.skills.word_stems import content_stems
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, normalize_label, read_taxonomy_csv
from plugins.postings.taxonomy_resource import TaxonomyResource
from plugins.postings.use_cases.skill_entities import entities_display
from training.train_skill_linker import Example, fit_acceptance

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(MINILM_PACKAGE) is None,
    reason=f"embedded model not installed: {MINILM_INSTALL_HINT}",
)
URI = "http://example.org/skill/"
CONCEPTS = [
    ("python", "Python (computer programming)", ["Python"]),
    ("sql", "SQL", ["structured query language"]),
    ("postgresql", "PostgreSQL", ["Postgres"]),
    ("customer-service", "customer service", ["customer support"]),
    ("3d-modelling", "3D modelling", ["3D modeling", "create 3D models"]),
    ("statistical-modelling", "statistical modelling", ["statistical modeling", "build statistical models"]),
    ("health-and-safety", "health and safety", []),
    ("teamwork", "work in teams", ["teamwork", "collaborate in teams"]),
    ("cooking", "prepare meals", ["cooking"]),
]


@pytest.fixture(scope="module")
def linked() -> SkillResolver:
    labels, preferred = [], {}
    for slug, label, alternatives in CONCEPTS:
        preferred[URI + slug] = label
        labels.append(TaxonomyLabelEntry(URI + slug, label, normalize_label(label), True))
        labels += [TaxonomyLabelEntry(URI + slug, alt, normalize_label(alt), False) for alt in alternatives]
    return SkillResolver(labels, preferred, embeddings=MiniLMEmbeddings(), linker=load_linker_model())


def slugs(ranking: list[tuple[str, float]]) -> list[str]:
    return [uri.removeprefix(URI) for uri, _ in ranking]


@needs_minilm
def test_the_linker_looks_past_words_that_name_no_skill(linked: SkillResolver) -> None:
    """'teamwork skills' is resolved as the label 'teamwork', not left to the spread-out reranker."""
    [found] = linked.resolve("strong teamwork skills", context="You bring strong teamwork skills.")
    assert (found.mention, found.concept_uri, found.stage) == (
        "strong teamwork skills",
        URI + "teamwork",
        "alt_label",
    )
    assert slugs(linked.rank("knowledge of SQL", limit=1)) == ["sql"]


# ESCO concepts by their real preferred labels (the prior is keyed by them), a few alternative labels
# each: transversal skills (work in teams, meet commitments) beside skills SkillSkape names often.
ESCO_TEAM_AND_GOALS = {
    "work in teams": ["work in groups", "working in teams", "support colleagues", "team-working"],
    "meet commitments": ["meet targets", "demonstrate commitment", "achieve goals", "work to deadlines"],
    "manage a team": ["managing a team", "supervise a team", "direct a team"],
    "lead a team": ["supervise a group of people", "lead teams", "leading a team"],
    "teamwork principles": ["teamwork approaches", "teamwork methods", "teamwork concepts"],
    "cooperate with colleagues": ["work together with colleagues", "collaborate with colleagues"],
    "identify with the company's goals": [
        "identify with the company's mission",
        "make the company's goals one's own",
    ],
    "analyse goal progress": ["test goal progress", "scrutinise goal progress"],
}


def team_and_goals_resolver() -> tuple[SkillResolver, dict[str, str]]:
    """The shipped linker over `ESCO_TEAM_AND_GOALS` (real MiniLM, ESCO URIs, so the prior counts
    them as ESCO concepts); and URI -> preferred label."""
    labels, preferred = [], {}
    for label, alternatives in ESCO_TEAM_AND_GOALS.items():
        uri = PRIOR_TAXONOMY_URI_PREFIX + "skill/" + normalize_label(label).replace(" ", "-")
        preferred[uri] = label
        labels.append(TaxonomyLabelEntry(uri, label, normalize_label(label), True))
        labels += [TaxonomyLabelEntry(uri, alt, normalize_label(alt), False) for alt in alternatives]
    resolver = SkillResolver(labels, preferred, embeddings=MiniLMEmbeddings(), linker=load_linker_model())
    return resolver, preferred


@needs_minilm
def test_a_transversal_skill_is_not_ranked_below_every_skill_the_training_data_names() -> None:
    """SkillSkape names 1 of ESCO's 440 transversal skills; counted as 0 in the prior, 'work in
    teams' lost to 'lead a team' for "enjoy working in a team" (the shipped model fills them in)."""
    resolver, preferred = team_and_goals_resolver()
    [found] = resolver.resolve("enjoy working in a team", context="You enjoy working in a team.")
    assert (found.concept_label, found.stage) == ("work in teams", "learned")
    [(best, _)] = resolver.rank(
        "achieve organizational goals", limit=1, context="You help us achieve organizational goals."
    )
    assert preferred[best] == "meet commitments"


@needs_minilm
def test_an_unmatched_mention_keeps_the_linkers_best_candidates_for_the_reviewer() -> None:
    resolver, preferred = team_and_goals_resolver()
    [found] = resolver.resolve("goal-oriented", context="We want someone goal-oriented.")
    assert found.concept_uri is None and found.stage == "unmatched"
    assert len(found.candidates) == 3
    assert all(preferred[c.concept_uri] == c.concept_label for c in found.candidates)
    assert found.candidates[0].concept_label in {"meet commitments", "analyse goal progress"}
    probabilities = [c.probability for c in found.candidates]
    assert probabilities == sorted(probabilities, reverse=True)
    entity = {
        "mention": found.mention,
        "concept_label": None,
        "candidates": [{"concept_label": c.concept_label} for c in found.candidates],
    }
    best = found.candidates[0].concept_label
    shown = entities_display({"entities": [entity]})
    assert shown.startswith(f"goal-oriented -> unmatched (candidates: 1 {best} | 2 ")


def test_the_prior_counts_esco_concepts_and_gives_concepts_of_other_taxonomies_its_median() -> None:
    model = dataclasses.replace(
        load_linker_model(), concept_prior={"SQL": 10, "work in teams": 3, "lead a team": 90}
    )
    esco, own = PRIOR_TAXONOMY_URI_PREFIX + "skill/x", "https://hr.example/skill/x"
    assert model.prior_count(esco, "lead a team") == model.prior_count(own, "lead a team") == 90
    assert model.prior_count(esco, "carve stone") == 0  # ESCO, and the training data never names it
    assert model.prior_count(own, "prepare financial statements") == 10  # unknown: the median


@needs_minilm
def test_a_taxonomy_the_prior_does_not_know_still_gets_confident_answers() -> None:
    """The demo taxonomy's concepts are not ESCO's (its prior knows 17 of 153 by label): counted as 0,
    "prepare annual financial statements" was left unmatched at probability 0.07."""
    concepts, _ = read_taxonomy_csv(DEMO_TAXONOMY_PATH)
    labels, preferred = [], {}
    for concept in concepts:
        preferred[concept.concept_uri] = concept.preferred_label
        for text in (concept.preferred_label, *concept.alt_labels):
            is_preferred = text == concept.preferred_label
            labels.append(TaxonomyLabelEntry(concept.concept_uri, text, normalize_label(text), is_preferred))
    resolver = SkillResolver(labels, preferred, embeddings=MiniLMEmbeddings(), linker=load_linker_model())
    sentence = (  # demo-008's
        "Hartley & Moss, a mid-size accounting firm, is hiring an accountant to prepare annual financial "
        "statements and tax returns for SME clients."
    )
    found = resolver.resolve("prepare annual financial statements and tax returns for SME clients", sentence)
    assert [(r.concept_label, r.stage) for r in found] == [("prepare financial statements", "learned")]
    [part] = resolver.resolve("tax returns for SME clients", context=sentence)
    assert (part.concept_label, part.stage) == ("prepare tax returns", "learned")


def test_the_shipped_model_is_read_once_and_carries_its_card(monkeypatch: pytest.MonkeyPatch) -> None:
    concept_reranker._load_linker_model.cache_clear()
    reads = []
    original = LinkerModel.from_json.__func__
    monkeypatch.setattr(
        LinkerModel, "from_json", classmethod(lambda cls, text: reads.append(1) or original(cls, text))
    )

    class NamedLikeMiniLM:
        name, model = "minilm", "all-MiniLM-L6-v2"

    resource = TaxonomyResource(embedding_backend="minilm")
    first = resource.linker(NamedLikeMiniLM())
    assert first is not None and resource.linker(NamedLikeMiniLM()) is first is load_linker_model()
    assert len(reads) == 1
    card = first.card
    assert "CC BY 4.0" in card["training_data"]["licenses"]["skillspan"]
    assert "European Union" in card["training_data"]["taxonomy"]
    assert 0.0 < first.threshold < 1.0
    assert card["threshold_at_selection"]["threshold"] == pytest.approx(first.threshold, abs=1e-4)
    assert DEFAULT_MODEL_PATH.stat().st_size < 10_000_000  # a small artefact

    class OtherModel:
        name, model = "ollama", "nomic-embed-text"

    assert resource.linker(OtherModel()) is None  # trained on MiniLM cosines: not used for others
    assert TaxonomyResource(linker_model="none").linker(NamedLikeMiniLM()) is None
    concept_reranker._load_linker_model.cache_clear()


def test_a_model_for_other_features_or_no_model_is_a_clear_error(tmp_path: Path) -> None:
    data = json.loads(DEFAULT_MODEL_PATH.read_text())
    data["models"]["mention"]["features"] = ["cos_mention", "something_else"]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="retrain it"):
        concept_reranker.load_linker_model(stale)
    with pytest.raises(FileNotFoundError, match="train_skill_linker"):
        concept_reranker.load_linker_model(tmp_path / "missing.json")
    trained_on = data["models"]["sentence"]["features"]
    assert trained_on == list(FEATURES[: len(trained_on)])  # an older model: later features get weight 0
    assert len(load_linker_model().model("sentence").weights) == len(FEATURES)


@needs_minilm
def test_a_label_resolves_as_itself_and_a_paraphrase_through_the_learned_stage(linked: SkillResolver) -> None:
    [python] = linked.resolve("Python")
    assert (python.concept_uri, python.stage) == (URI + "python", "alt_label")
    assert linked.link_threshold <= python.confidence <= 1.0
    assert [(r.concept_uri, r.stage) for r in linked.resolve("SQL and Postgres")] == [
        (URI + "sql", "exact"),
        (URI + "postgresql", "alt_label"),
    ]
    # On this nine-concept taxonomy confidences sit low (the model is calibrated on ESCO), so the
    # learned stage is shown without the threshold.
    [helping] = lenient(linked).resolve("helping customers with their questions", "Our agents love helping.")
    assert (helping.concept_uri, helping.stage) == (URI + "customer-service", "learned")


@needs_minilm
def test_below_the_threshold_a_mention_is_unmatched(linked: SkillResolver) -> None:
    [unknown] = linked.resolve("underwater basket weaving")
    assert (unknown.concept_uri, unknown.stage, unknown.confidence) == (None, "unmatched", 0.0)
    concepts, confidence = linked.confidence_of("underwater basket weaving")
    assert 0.0 < confidence < linked.link_threshold
    [forced] = lenient(linked).resolve("underwater basket weaving")
    assert forced.concept_uri == linked.concept_uris[concepts[0]] and forced.stage == "learned"


def lenient(resolver: SkillResolver) -> SkillResolver:
    """The same resolver with threshold 0: every mention gets its best candidate."""
    labels = [
        TaxonomyLabelEntry(URI + slug, label, normalize_label(label), position == 0)
        for slug, preferred, alternatives in CONCEPTS
        for position, label in enumerate([preferred, *alternatives])
    ]
    return SkillResolver(
        labels,
        resolver.preferred_labels,
        embeddings=resolver.embeddings,
        linker=resolver.linker,
        link_threshold=0.0,
    )


@needs_minilm
def test_the_sentence_decides_what_an_ambiguous_mention_means(linked: SkillResolver) -> None:
    games = "You will be modelling characters and environments for our video games."
    churn = "You will be modelling customer churn with regression in R."
    assert slugs(linked.rank("modelling", limit=1, context=games)) == ["3d-modelling"]
    assert slugs(linked.rank("modelling", limit=1, context=churn)) == ["statistical-modelling"]
    [in_games] = lenient(linked).resolve("modelling", games)
    [in_churn] = lenient(linked).resolve("modelling", churn)
    assert (in_games.concept_uri, in_churn.concept_uri) == (
        URI + "3d-modelling",
        URI + "statistical-modelling",
    )


@needs_minilm
def test_a_sentence_is_linked_without_any_extracted_mention(linked: SkillResolver) -> None:
    ranking = slugs(linked.link_sentence("We write Python and query Postgres every day."))
    assert set(ranking[:2]) == {"python", "postgresql"}
    assert linked.label_ngrams("We write Python and query Postgres every day.") == ["python", "postgres"]
    concepts, _, _ = linked.link("collaborating with your team", "Great people around you.")
    assert linked.concept_uris[concepts[0]] == URI + "teamwork"
    with_mentions = dict(linked.link_sentence("Great people around you.", ["collaborating with your team"]))
    alone = dict(linked.link_sentence("Great people around you."))
    assert with_mentions[URI + "teamwork"] > alone[URI + "teamwork"]  # the mention lifts its concept
    # A label that is only a word of the sentence counts less than one the extractor named
    # (NGRAM_WEIGHT): "teamwork" here is not what the sentence asks for.
    churn = "Teamwork matters, but mostly you will model customer churn with regression."
    named = dict(linked.link_sentence(churn, ["teamwork"]))[URI + "teamwork"]
    assert dict(linked.link_sentence(churn))[URI + "teamwork"] < named
    assert linked.link_sentence("  ") == []
    assert len(linked.rank("python")) == len(CONCEPTS)  # a full ranking: candidates, then the rest


def test_resolution_figures_of_a_run() -> None:
    outputs = [
        {
            "entities": [
                {"concept_uri": "a", "confidence": 0.9, "stage": "exact"},
                {"concept_uri": None, "confidence": 0.0, "stage": "unmatched"},
            ]
        },
        {"entities": [{"concept_uri": "b", "confidence": 0.5, "stage": "learned"}]},
        {"entities": []},
    ]
    figures = resolution_figures(outputs)
    assert figures["mentions"] == 3
    assert figures["share_resolved"] == pytest.approx(2 / 3, abs=1e-4)
    assert figures["share_unmatched"] == pytest.approx(1 / 3, abs=1e-4)
    assert figures["mean_confidence"] == pytest.approx(0.7)
    assert figures["share_learned"] == pytest.approx(1 / 3, abs=1e-4)
    assert resolution_figures([])["share_resolved"] == 0.0


def test_semantic_linking_is_the_default_when_minilm_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINE_EMBEDDING_BACKEND", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert settings_module.Settings.from_env().postings.embedding_backend == "minilm"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert settings_module.Settings.from_env().postings.embedding_backend == "none"
    monkeypatch.setenv("PIPELINE_EMBEDDING_BACKEND", "none")
    assert settings_module.Settings.from_env().postings.embedding_backend == "none"


def test_training_texts_are_embedded_once_and_kept_between_runs(tmp_path: Path) -> None:
    class Counting:
        name, model = "counting", "length-2"
        calls: list[list[str]] = []

        def embed(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(list(texts))
            return [[float(len(text)), 1.0] for text in texts]

    backend = Counting()
    first = RememberingEmbeddings(backend, tmp_path / "vectors.npz")
    assert first.embed(["Python", "naïve Bayes", "Python"]) == [[6.0, 1.0], [11.0, 1.0], [6.0, 1.0]]
    first.save()
    second = RememberingEmbeddings(backend, tmp_path / "vectors.npz")
    assert second.embed(["naïve Bayes", "SQL"]) == [[11.0, 1.0], [3.0, 1.0]]
    assert backend.calls == [["Python", "naïve Bayes"], ["SQL"]]


def test_word_stems_tie_the_forms_of_a_word_together() -> None:
    assert content_stems("Developing software applications") == content_stems("develop software application")
    assert content_stems("communication") == content_stems("communicating") == ("commu",)
    assert content_stems("analysis of data") == content_stems("data analyses")[::-1]
    assert content_stems("experience with C++ and node.js") == ("c++", "node.js")  # kept whole
    assert content_stems("the and of") == ()


def test_a_query_adapter_of_an_older_model_round_trips() -> None:
    rng = np.random.default_rng(0)
    query = rng.normal(size=12)
    query /= np.linalg.norm(query)
    adapter = QueryAdapter(rng.normal(0, 0.3, (12, 3)), rng.normal(0, 0.3, (12, 3)))
    adapted = adapter.apply(query[None, :])
    assert np.linalg.norm(adapted) == pytest.approx(1.0, abs=1e-5)
    model = LinkerModel(load_linker_model().models, 0.5, {}, {}, QueryAdapter.from_dict(adapter.to_dict()))
    again = LinkerModel.from_json(model.to_json())
    assert again.adapter is not None and np.allclose(again.adapter.apply(query), adapted[0], atol=1e-4)


def test_a_full_query_memo_is_emptied_without_losing_the_texts_of_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Lengths:
        name, model = "lengths", "length-2"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(text)), 1.0] for text in texts]

    entries = [TaxonomyLabelEntry(URI + "sql", "SQL", "sql", True)]
    resolver = SkillResolver(entries, {URI + "sql": "SQL"}, embeddings=Lengths())
    monkeypatch.setattr("plugins.postings.skills.skill_resolver.QUERY_MEMO_SIZE", 2)
    resolver._embed_queries(["a", "bb"])
    vectors = resolver._embed_queries(["bb", "ccc"])  # "bb" was memoized; "ccc" overflows the memo
    assert vectors.shape == (2, 2) and vectors[0, 0] > vectors[0, 1] * 1.9


def test_the_listwise_ranker_learns_its_gradient_is_right_and_it_round_trips() -> None:
    rng = np.random.default_rng(1)
    count = len(FEATURES)
    features, labels = [], []
    for _ in range(40):  # gold is the candidate where features 0 and 1 are both high (an interaction)
        rows = rng.normal(size=(6, count))
        gold = int(np.argmax(np.minimum(rows[:, 0], rows[:, 1])))
        features.append(rows)
        labels.append((np.arange(6) == gold) * 1.0)
    data = RankerData.of(features, labels)
    model, history = fit_ranker(data, data, units=4, steps=200, learning_rate=0.05)
    assert history[-1]["dev_loss"] < history[0]["dev_loss"]
    top = [np.argmax(model.logits(f)) == np.argmax(y) for f, y in zip(features, labels, strict=True)]
    assert np.mean(top) > 0.8
    loss, grads = _ranker_loss(model, data, 1.0, 0.5)
    bumped = model.hidden.copy()
    bumped[1, 2] += 1e-6
    moved = RankerModel(
        model.mean, model.scale, model.linear, bumped, model.hidden_bias, model.out, model.bias
    )
    numeric = (_ranker_loss(moved, data, 1.0, 0.5, want_gradient=False)[0] - loss) / 1e-6
    assert numeric == pytest.approx(grads["hidden"][1, 2], abs=1e-4)
    shipped = load_linker_model()
    linker = LinkerModel({**shipped.models, "mention": model}, 0.5, {}, {}, shipped.adapter)
    again = LinkerModel.from_json(linker.to_json()).model("mention")
    assert isinstance(again, RankerModel)
    assert np.allclose(again.probabilities(features[0]), model.probabilities(features[0]), atol=1e-4)


def test_a_close_runner_up_makes_the_shipped_linker_less_sure_of_its_best_candidate(tmp_path: Path) -> None:
    shipped = load_linker_model()
    assert shipped.acceptance is not None, "the shipped model decides 'unmatched' with its acceptance model"
    tiers = np.zeros(10)
    alone = np.array([0.6, 0.02, 0.01, 0.01, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0])
    contested = np.array([0.6, 0.55, 0.3, 0.2, 0.1, 0.05, 0.0, 0.0, 0.0, 0.0])
    # The best candidate's own features (read when the acceptance model reads them): typical ones.
    top = shipped.models["mention"].mean  # type: ignore[union-attr]
    assert shipped.top_confidence(contested, tiers, top) < shipped.top_confidence(alone, tiers, top)
    assert shipped.top_confidence(np.array([]), np.array([])) == 0.0
    # Stored and read back alike; a model for other acceptance features is refused with the fix.
    again = LinkerModel.from_json(shipped.to_json())
    assert again.top_confidence(contested, tiers, top) == pytest.approx(
        shipped.top_confidence(contested, tiers, top)
    )
    data = json.loads(shipped.to_json())
    data["acceptance"]["features"] = [*ACCEPTANCE_FEATURES[:-1], "something_else"]
    with pytest.raises(ValueError, match="retrain it"):
        LinkerModel.from_json(json.dumps(data))
    del data["acceptance"]  # a model stored before acceptance models: the best probability
    assert LinkerModel.from_json(json.dumps(data)).top_confidence(contested, tiers) == 0.6
    # The surer the best candidate, the surer the answer: never less sure as its probability rises.
    rising = [
        shipped.top_confidence(np.array([p, 0.001]), np.zeros(2), top) for p in (0.3, 0.6, 0.9, 0.99, 0.99999)
    ]
    assert rising == sorted(rising) and rising[-1] > shipped.threshold
    assert isinstance(again.acceptance, AcceptanceModel)


@needs_minilm
def test_a_resolution_carries_the_confidence_the_threshold_was_set_on(linked: SkillResolver) -> None:
    text, context = "helping customers with their questions", "Our agents love helping."
    concepts, probabilities, tiers, features = linked.link_scored(text, context)
    [helping] = lenient(linked).resolve(text, context)
    assert helping.confidence == pytest.approx(
        linked.top_confidence(probabilities, tiers, features[0]), abs=1e-4
    )
    assert helping.confidence == pytest.approx(linked.confidence_of(text, context)[1], abs=1e-4)
    assert helping.confidence != pytest.approx(float(probabilities[0]), abs=1e-4)


def test_the_acceptance_model_learns_that_a_contested_best_candidate_is_often_wrong() -> None:
    class FirstColumn:
        """A reranker whose probability is the first feature."""

        def probabilities(self, features: np.ndarray) -> np.ndarray:
            return features[:, 0]

    rng = np.random.default_rng(3)
    examples = []
    for index in range(400):
        probabilities = np.sort(rng.uniform(0.01, 0.2, 6))[::-1]
        probabilities[0] = rng.uniform(0.3, 0.9)
        contested = index % 2 == 0
        if contested:  # a runner-up nearly as likely: half the time it is the gold one
            probabilities[1] = probabilities[0] - 0.02
        features = np.zeros((6, len(FEATURES)))
        features[:, 0] = probabilities
        gold = 1 if contested and rng.random() < 0.5 else 0
        examples.append(Example(features, (np.arange(6) == gold) * 1.0))
    model, card = fit_acceptance(
        {"mention": FirstColumn(), "bare_mention": FirstColumn()},
        {"mention": examples, "bare_mention": [], "sentence": []},
    )
    tiers = np.zeros(6)
    clear = np.array([0.6, 0.1, 0.05, 0.05, 0.02, 0.01])
    close = np.array([0.6, 0.58, 0.05, 0.05, 0.02, 0.01])
    assert model.confidence(clear, tiers) > 0.9 > 0.7 > model.confidence(close, tiers)
    assert card["queries"] == 400 and card["best_candidate_right"] == pytest.approx(0.75, abs=0.06)


def test_an_acceptance_model_may_read_the_best_candidates_own_features() -> None:
    """With `reads_top`, the acceptance model also reads the best candidate's reranker features
    (`ACCEPTANCE_TOP_FEATURES`): here whether the spelling's nearest concept is the best one."""

    class FirstColumn:
        def probabilities(self, features: np.ndarray) -> np.ndarray:
            return features[:, 0]

    rng = np.random.default_rng(5)
    gap = FEATURES.index("fuzzy_gap")
    examples = []
    for _ in range(400):
        features = np.zeros((4, len(FEATURES)))
        features[:, 0] = [0.6, 0.2, 0.1, 0.05]
        agrees = rng.random() < 0.5  # the best candidate is also the best spelled one
        features[0, gap] = 0.0 if agrees else -0.4
        gold = 0 if agrees or rng.random() < 0.2 else 1
        examples.append(Example(features, (np.arange(4) == gold) * 1.0))
    reranker = {"mention": FirstColumn(), "bare_mention": FirstColumn()}
    grouped = {"mention": examples, "bare_mention": [], "sentence": []}
    model, card = fit_acceptance(reranker, grouped, reads_top=True)  # type: ignore[arg-type]
    shape_only, _ = fit_acceptance(reranker, grouped)  # type: ignore[arg-type]
    probabilities, tiers = np.array([0.6, 0.2, 0.1, 0.05]), np.zeros(4)
    agreeing, apart = examples[0].features[0].copy(), examples[0].features[0].copy()
    agreeing[gap], apart[gap] = 0.0, -0.4
    assert (
        model.confidence(probabilities, tiers, agreeing)
        > 0.8
        > 0.4
        > model.confidence(probabilities, tiers, apart)
    )
    assert card["features"][-len(ACCEPTANCE_TOP_FEATURES) :] == [f"top_{n}" for n in ACCEPTANCE_TOP_FEATURES]
    with pytest.raises(ValueError, match="pass `top`"):
        model.confidence(probabilities, tiers)
    again = AcceptanceModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again.reads_top and again.confidence(probabilities, tiers, apart) == pytest.approx(
        model.confidence(probabilities, tiers, apart), abs=1e-4
    )
    assert not AcceptanceModel.from_dict(shape_only.to_dict()).reads_top
    assert shape_only.confidence(probabilities, tiers, apart) == shape_only.confidence(probabilities, tiers)


def test_a_listwise_reranker_learns_the_order_within_each_query() -> None:
    """`fit_listwise_logistic` (conditional logit) recovers the weights that chose each query's gold
    candidate among its others, whatever the queries' sizes."""
    rng = np.random.default_rng(11)
    truth = np.array([1.5, -1.0, 0.5])
    sizes = rng.integers(2, 9, 600)
    features = rng.normal(size=(int(sizes.sum()), 3))
    scores = features @ truth + rng.gumbel(size=len(features))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    labels = np.zeros(len(features))
    for start, size in zip(starts, sizes, strict=True):
        labels[start + int(np.argmax(scores[start : start + size]))] = 1.0
    model = fit_listwise_logistic(features, labels, starts, l2=1e-4)
    learned = model.weights / model.scale
    assert np.corrcoef(learned, truth)[0, 1] > 0.98 and model.bias == 0.0


@needs_minilm
def test_a_concept_projection_goes_on_labels_and_queries_alike_and_ships_beside_the_model(
    tmp_path: Path,
) -> None:
    """A rotation changes no cosine when both sides are projected, so every answer stays the same;
    one side projected alone would scatter them. The matrix is written beside the model JSON."""
    labels, preferred = [], {}
    for slug, label, alternatives in CONCEPTS:
        preferred[URI + slug] = label
        labels.append(TaxonomyLabelEntry(URI + slug, label, normalize_label(label), True))
        labels += [TaxonomyLabelEntry(URI + slug, alt, normalize_label(alt), False) for alt in alternatives]
    shipped = load_linker_model()
    rotation, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(384, 384)))
    projected = dataclasses.replace(shipped, projection=ConceptProjection(rotation.astype(np.float32)))
    path = tmp_path / "linker.json"
    path.write_text(projected.to_json())
    ConceptProjection(rotation.astype(np.float32), "projection.npz").save(tmp_path)
    read_back = load_linker_model(path)
    assert read_back.projection is not None
    assert np.allclose(read_back.projection.matrix, rotation, atol=2e-3)  # stored as float16
    embeddings = MiniLMEmbeddings()
    plain = SkillResolver(labels, preferred, embeddings=embeddings, linker=shipped)
    turned = SkillResolver(labels, preferred, embeddings=embeddings, linker=read_back)
    for mention, context in [
        ("Python", None),
        ("writing SQL queries", "You will be writing SQL queries against Postgres."),
        ("modelling", "You will be modelling customer churn with regression in R."),
    ]:
        before, after = plain.resolve(mention, context), turned.resolve(mention, context)
        assert [(r.concept_uri, r.stage) for r in after] == [(r.concept_uri, r.stage) for r in before]
        assert [r.confidence for r in after] == pytest.approx([r.confidence for r in before], abs=0.02)
    assert turned._label_vectors is not None and not np.allclose(turned._label_vectors, plain._label_vectors)


def test_the_projection_trainer_learns_a_map_that_brings_mentions_to_their_concepts() -> None:
    """Anchors are their concept's vector seen through a fixed distortion: the fitted map undoes enough
    of it that held-out concepts (never trained on) are found more often than with the identity."""
    pytest.importorskip("torch")
    import argparse

    from training.train_linking_projection import Anchors, fit, held_out_mrr, unit

    rng = np.random.default_rng(1)
    dimension, concepts = 24, 400
    centroids = unit(rng.normal(size=(concepts, dimension)))
    distortion = np.eye(dimension) + rng.normal(0, 0.35, (dimension, dimension))

    def anchors(which: np.ndarray) -> Anchors:
        noisy = unit((centroids[which] @ distortion) + rng.normal(0, 0.05, (len(which), dimension)))
        return Anchors(noisy, centroids[which], which, rng.integers(0, concepts, (len(which), 2)), [])

    train = anchors(np.repeat(np.arange(300), 4))
    held = anchors(np.arange(300, concepts))
    args = argparse.Namespace(threads=1, learning_rate=1e-2, epochs=6, batch=128, temperature=0.05, l2=1e-4)
    matrix, history = fit(train, held, centroids, args)
    identity = held_out_mrr(np.eye(dimension, dtype=np.float32), held, centroids)
    assert history[0]["held_out_mrr"] == pytest.approx(identity, abs=1e-4)
    assert held_out_mrr(matrix, held, centroids) > identity + 0.1


@needs_minilm
def test_a_projection_used_as_a_feature_leaves_candidates_to_the_encoders_own_vectors() -> None:
    """With `use="feature"` the label vectors and queries stay unprojected (the same candidates as
    without it) and only `cos_adapted` reads the projection; the model file says which use it has."""
    labels, preferred = [], {}
    for slug, label, alternatives in CONCEPTS:
        preferred[URI + slug] = label
        labels.append(TaxonomyLabelEntry(URI + slug, label, normalize_label(label), True))
        labels += [TaxonomyLabelEntry(URI + slug, alt, normalize_label(alt), False) for alt in alternatives]
    shipped = load_linker_model()
    squash = np.eye(384, dtype=np.float32)
    squash[:, :192] *= 0.1  # shrinks half the dimensions: cosines change
    feature = dataclasses.replace(shipped, projection=ConceptProjection(squash, use="feature"))
    assert json.loads(feature.to_json())["projection"]["use"] == "feature"
    embeddings = MiniLMEmbeddings()
    plain = SkillResolver(labels, preferred, embeddings=embeddings, linker=shipped)
    featured = SkillResolver(labels, preferred, embeddings=embeddings, linker=feature)
    text, context = "writing SQL queries", "You will be writing SQL queries against Postgres."
    query, sentence = featured._embed_queries([text, context])
    assert np.allclose(query, plain._embed_queries([text])[0])
    signals, concepts, _ = featured.candidate_signals(text, query, sentence)
    plain_signals, plain_concepts, _ = plain.candidate_signals(text, query, sentence)
    assert np.array_equal(concepts, plain_concepts)
    assert np.allclose(signals.cos_mention, plain_signals.cos_mention)
    assert not np.allclose(signals.cos_adapted, signals.cos_mention)
