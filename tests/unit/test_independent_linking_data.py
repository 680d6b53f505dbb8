"""The benchmark-free linker's data (issue 43): the prior's sources, the training pairs, the label
hidden while a pair is scored, and the shipped model's card."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from plugins.postings.skills.concept_reranker import DEFAULT_MODEL_PATH, load_linker_model
from plugins.postings.skills.skill_resolver import SkillResolver, TaxonomyLabelEntry
from plugins.postings.store.taxonomy import normalize_label
from training.independent_data import (
    SOURCES,
    EscoConcept,
    benchmark_sentence_keys,
    esco_alt_pairs,
    independent_prior,
    label_lookup,
    match_label,
    multi_skill_pairs,
    occupation_counts,
    onet_pairs,
    read_onet_examples,
    read_skillspan_train,
    skillspan_pairs,
)

ESCO = "http://data.europa.eu/esco/skill/"
CONCEPTS = [
    EscoConcept(
        ESCO + "py", "Python (computer programming)", ("Python",), "Techniques of programming.", "k", ""
    ),
    EscoConcept(ESCO + "sql", "SQL", ("structured query language",), "A query language.", "knowledge", ""),
    EscoConcept(ESCO + "team", "work in teams", ("teamwork", "team working"), "Work with others.", "s", ""),
    EscoConcept(ESCO + "stone", "carve stone", ("sculpt stone",), "Carve stone. Shape it.", "s", ""),
]


def skillspan_file(tmp_path: Path) -> Path:
    rows = [
        {
            "idx": 1,
            "source": "tech",
            "tokens": ["Knowledge", "of", "Python", "and", "teamwork"],
            "tags_skill": ["O", "O", "O", "O", "B"],
            "tags_knowledge": ["B", "I", "I", "O", "O"],
        },
        {  # the text of a benchmark sentence: dropped
            "idx": 2,
            "source": "tech",
            "tokens": ["financial", "services"],
            "tags_skill": ["O", "O"],
            "tags_knowledge": ["B", "I"],
        },
    ]
    path = tmp_path / "train.json"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


def test_the_prior_counts_occupations_onet_and_skillspan_train_never_a_benchmark(tmp_path: Path) -> None:
    relations = tmp_path / "relations.zip"
    with zipfile.ZipFile(relations, "w") as archive:
        archive.writestr(
            "occupationSkillRelations.csv",
            "occupationUri,relationType,skillType,skillUri\n"
            f"o1,essential,knowledge,{ESCO}py\no2,optional,knowledge,{ESCO}py\no2,essential,skill,{ESCO}team\n",
        )
    onet = tmp_path / "tech.txt"
    onet.write_text(
        "O*NET-SOC Code\tExample\tCommodity Code\tCommodity Title\tHot Technology\tIn Demand\n"
        "15-1.00\tPython\t1\tObject software\tY\tN\n15-2.00\tPython\t1\tObject software\tY\tN\n"
        "15-2.00\tMicrosoft Excel\t2\tSpreadsheet software\tY\tN\n",
        encoding="utf-8",
    )
    sentences, dropped = read_skillspan_train(skillspan_file(tmp_path), {"financial services"})
    assert dropped == 1 and [s.spans for s in sentences] == [("teamwork", "Knowledge of Python")]
    lookup = label_lookup(CONCEPTS)
    prior = independent_prior(
        CONCEPTS, occupation_counts(relations), read_onet_examples(onet), sentences, lookup
    )
    assert prior.parts["esco_essential"] == {"Python (computer programming)": 1, "work in teams": 1}
    assert prior.parts["esco_optional"] == {"Python (computer programming)": 1}
    assert prior.parts["onet"] == {"Python (computer programming)": 2}  # two occupations list it
    assert prior.parts["skillspan"] == {"Python (computer programming)": 1, "work in teams": 1}
    assert prior.total == {"Python (computer programming)": 5, "work in teams": 2}
    assert "carve stone" not in prior.total  # no source names it
    assert not any(
        "skillskape" in text.lower() or "decorte" in text.lower() for text in prior.sources.values()
    )


def test_spans_that_are_labels_become_pairs_as_written_and_with_the_label_hidden(tmp_path: Path) -> None:
    lookup = label_lookup(CONCEPTS)
    assert match_label("Knowledge of Python", lookup) == ("python", {ESCO + "py"})
    assert match_label("strong teamwork skills", lookup) == ("teamwork", {ESCO + "team"})
    assert match_label("banking", lookup) is None
    sentences, _ = read_skillspan_train(skillspan_file(tmp_path))
    pairs = skillspan_pairs(sentences[:1], lookup)
    mentions = [(p.kind, p.mention, p.hidden_label) for p in pairs if p.kind == "mention"]
    assert mentions == [
        ("mention", "teamwork", None),
        ("mention", "teamwork", "teamwork"),
        ("mention", "Knowledge of Python", None),
        ("mention", "Knowledge of Python", "python"),
    ]
    [sentence] = [p for p in pairs if p.kind == "sentence"]
    assert sentence.gold == {ESCO + "py", ESCO + "team"} and sentence.group == "tech:1"
    onet = onet_pairs({"Python": 2, "Microsoft Excel": 1}, lookup)
    assert [(p.mention, p.hidden_label) for p in onet] == [("Python", None), ("Python", "python")]


def test_an_alternative_label_is_a_mention_with_itself_hidden_never_the_preferred_label() -> None:
    pairs = esco_alt_pairs(CONCEPTS, label_lookup(CONCEPTS), [("You know Java well", "Java")], 10, seed=1)
    by_concept = {}
    for pair in pairs:
        by_concept.setdefault(next(iter(pair.gold)), []).append(pair)
    assert set(by_concept) == {ESCO + "py", ESCO + "sql", ESCO + "team", ESCO + "stone"}
    for concept in CONCEPTS:
        kinds = {(p.kind, p.context_source) for p in by_concept[concept.uri]}
        assert kinds == {
            ("bare_mention", ""),
            ("mention", "description"),
            ("mention", "ad"),
            ("sentence", "ad"),
        }
        for pair in by_concept[concept.uri]:
            alt = pair.mention if pair.kind != "sentence" else pair.hidden_label
            assert alt in concept.alt_labels or alt in map(normalize_label, concept.alt_labels)
            assert pair.hidden_label == normalize_label(alt) != normalize_label(concept.preferred_label)
    [ad, ad_sentence] = [p for p in by_concept[ESCO + "sql"] if p.context_source == "ad"]
    assert ad.context == ad_sentence.mention == "You know structured query language well"
    [described] = [p for p in by_concept[ESCO + "stone"] if p.context_source == "description"]
    assert described.context == "Carve stone."  # the first sentence


def test_a_job_ad_sentence_gets_several_skills_set_in_with_their_labels_hidden(tmp_path: Path) -> None:
    sentences, _ = read_skillspan_train(skillspan_file(tmp_path))
    [pair] = multi_skill_pairs(CONCEPTS, sentences, 5, seed=3)
    assert pair.kind == "sentence" and pair.source == "esco_alt" and len(pair.gold) == 2
    assert "Knowledge of Python" not in pair.mention and pair.mention.startswith("structured query language")
    hidden = {pair.hidden_label, *pair.also_hidden}
    assert len(hidden) == 2 and all(label in normalize_label(pair.mention) for label in hidden)


def test_benchmark_sentences_are_read_as_text_only(tmp_path: Path) -> None:
    folder = tmp_path / "decorte_esco_linked"
    folder.mkdir()
    (folder / "tech_validation_annotations.csv").write_text(
        "sentence,span,sub_span,label\nFinancial  services!,financial services,,banking\n", encoding="utf-8"
    )
    assert benchmark_sentence_keys(tmp_path) == {"financial services"}


class Hashed:
    """A deterministic stand-in for an embedding model: bag of hashed words."""

    name, model = "hashed", "words-64"

    def embed(self, texts: list[str]) -> list[list[float]]:
        rows = []
        for text in texts:
            vector = np.zeros(64)
            for word in normalize_label(text).replace("(", " ").replace(")", " ").split():
                vector[hash(word) % 64] += 1.0
            rows.append((vector / max(np.linalg.norm(vector), 1e-9)).tolist())
        return rows


def test_a_hidden_label_is_absent_from_the_candidates_signals() -> None:
    labels, preferred = [], {}
    for concept in CONCEPTS:
        preferred[concept.uri] = concept.preferred_label
        for text in (concept.preferred_label, *concept.alt_labels):
            is_preferred = text == concept.preferred_label
            labels.append(TaxonomyLabelEntry(concept.uri, text, normalize_label(text), is_preferred))
    resolver = SkillResolver(labels, preferred, embeddings=Hashed())
    resolver.label_index()
    query = resolver._embed_queries(["teamwork"])[0]
    team = resolver._concept_index[ESCO + "team"]
    signals, concepts, tiers = resolver.candidate_signals("teamwork", query, None)
    position = int(np.flatnonzero(concepts == team)[0])
    assert tiers[position] == 1 and signals.cos_mention[position] == pytest.approx(1.0)
    hidden = frozenset({resolver._label_ids["teamwork"]})
    signals, concepts, tiers = resolver.candidate_signals("teamwork", query, None, hidden)
    position = int(np.flatnonzero(concepts == team)[0])  # still found, through its other labels
    assert tiers[position] == 0 and signals.cos_mention[position] < 0.99 and signals.fuzzy[position] < 1.0
    assert signals.cos_concept[position] < 0.99  # its meaning without the hidden label
    preferred = frozenset({resolver._label_ids["work in teams"], resolver._label_ids["teamwork"]})
    signals, concepts, _ = resolver.candidate_signals("teamwork", query, None, preferred)
    position = int(np.flatnonzero(concepts == team)[0])  # its preferred label hidden too: not read
    assert signals.cos_preferred[position] == signals.cos_mention[position] < 0.99


def test_the_shipped_linker_names_its_sources_and_none_is_benchmark_derived() -> None:
    model = load_linker_model()
    card = model.card
    assert card["benchmark_exposure"]["decorte_labels"] is False
    assert card["benchmark_exposure"]["skillskape"] is False
    assert set(card["training_data"]["sources"]) <= set(SOURCES)
    assert card["training_data"]["positives_by_source"]  # where every positive came from
    described = json.dumps({k: card[k] for k in ("training_data", "prior", "acceptance")}).lower()
    assert "skillskape" not in described and "decorte" not in described
    assert "selection" in card["benchmark_exposure"] and "held-out" in card["benchmark_exposure"]["selection"]
    # The prior: counted from ESCO, O*NET and SkillSpan train; nonzero far beyond SkillSkape's 953
    # concepts, e.g. for skills no benchmark sentence names; each count is the sum of its parts.
    nonzero = [label for label, count in model.concept_prior.items() if count]
    assert len(nonzero) > 10_000
    assert model.concept_prior["manage musical staff"] > 0 and model.concept_prior["breed horses"] > 0
    assert model.prior_part_names == ("esco_essential", "esco_optional", "onet", "skillspan")
    assert all(sum(model.prior_parts[label]) == model.concept_prior[label] for label in nonzero[:500])
    assert model.trained_concepts and DEFAULT_MODEL_PATH.stat().st_size < 10_000_000


def test_a_weighted_fit_counts_a_row_as_often_as_its_weight() -> None:
    """Popularity weighting (the trainer's `set_popularity_weights`) rests on this: a row of weight 2
    is fitted as two copies of it."""
    from plugins.postings.skills.concept_reranker import fit_logistic, fit_platt

    rng = np.random.default_rng(3)
    features = rng.normal(size=(60, 3))
    labels = (features[:, 0] + rng.normal(size=60) > 0).astype(np.float64)
    weights = rng.integers(1, 4, size=60).astype(np.float64)
    weighted = fit_logistic(features, labels, l2=1e-3, weights=weights * 60 / weights.sum())
    repeated = fit_logistic(
        np.repeat(features, weights.astype(int), axis=0), np.repeat(labels, weights.astype(int))
    )
    assert np.allclose(weighted.logits(features), repeated.logits(features), atol=1e-5)
    platt_weighted = fit_platt(features[:, 0], labels, weights)
    platt_repeated = fit_platt(
        np.repeat(features[:, 0], weights.astype(int)), np.repeat(labels, weights.astype(int))
    )
    assert np.allclose(platt_weighted, platt_repeated, atol=1e-6)


def test_queries_of_concepts_many_occupations_ask_for_weigh_more() -> None:
    """ESCO-sampled queries weigh (1 + prior count) ** exponent (mean 1 per source); job-ad ones 1."""
    from training.independent_data import Pair, PriorCounts
    from training.train_skill_linker import Data, Example, set_popularity_weights

    def example(source: str, uri: str) -> Example:
        pair = Pair("mention", "m", None, frozenset({ESCO + uri}), None, source, uri)
        return Example(np.zeros((1, 1)), np.ones(1), pair)

    examples = [example("esco_alt", "py"), example("esco_alt", "stone"), example("skillspan", "py")]
    popularity = {ESCO + "py": 99, ESCO + "stone": 0}
    data = Data(examples, PriorCounts({}, {}, ""), 0.1, {}, popularity)
    set_popularity_weights(data, 0.5)
    assert examples[0].weight == pytest.approx(10 / 5.5) and examples[1].weight == pytest.approx(1 / 5.5)
    assert examples[2].weight == 1.0
    set_popularity_weights(data, 0.0)
    assert [e.weight for e in examples] == [1.0, 1.0, 1.0]
