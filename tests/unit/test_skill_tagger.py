"""The shipped skill tagger: loaded once per run, tags a known sentence, offsets that point at the text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from plugins.postings.skills import skill_extraction
from plugins.postings.skills.context_tagger import ContextTagger
from plugins.postings.skills.mention_grounding import Mention
from plugins.postings.skills.skill_extraction import (
    SKILL_MENTIONS_SCHEMA,
    SkillExtractor,
    extract_mentions,
    extract_with_fallback,
    skills_output,
)
from plugins.postings.skills.skill_tagger import (
    CLUSTERS_FILE,
    MODEL_DIR,
    MODEL_NAME,
    SkillTagger,
    TaggerCard,
    WordClusters,
)
from plugins.postings.skills.taxonomy_matcher import TaxonomyMatcher
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH

KNOWN = "Strong knowledge of Java and Spring Boot; experience with Docker and Kubernetes."


def test_the_model_loads_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[object] = []
    original_init = ContextTagger.__init__

    def counting_init(self: ContextTagger, *args: object, **kwargs: object) -> None:
        loads.append(self)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(ContextTagger, "__init__", counting_init)
    monkeypatch.setattr(skill_extraction, "_loaded", {})
    results = [extract_mentions("Backend developer", KNOWN) for _ in range(3)]
    results += [extract_with_fallback("Backend developer", KNOWN, DEMO_TAXONOMY_PATH) for _ in range(2)]
    assert len(loads) == 1
    assert results[0] == results[1] == results[2] == results[3] != []


def test_the_crf_tagger_stays_selectable() -> None:
    extractor = SkillExtractor.load(tagger="crf")
    assert isinstance(extractor.tagger, SkillTagger)
    assert ("Docker", "knowledge") in {(m.text, m.kind) for m in extractor.extract("", KNOWN)}
    with pytest.raises(ValueError, match="tagger must be one of"):
        SkillExtractor.load(tagger="magic")


def test_the_tagger_tags_a_known_sentence() -> None:
    mentions = SkillTagger.load().tag(KNOWN)
    found = {(m.text, m.kind) for m in mentions}
    assert {("Java", "knowledge"), ("Docker", "knowledge"), ("Kubernetes", "knowledge")} <= found
    assert all(m.source == "tagger" and 0 < m.score <= 1 for m in mentions)


def test_offsets_point_at_the_text_of_their_field() -> None:
    title = "Python developer"
    description = "You will build APIs in Python and SQL.\nExperience with Docker is a plus."
    mentions = extract_mentions(title, description)
    assert mentions
    texts = {"title": title, "description": description}
    for mention in mentions:
        assert texts[mention.field][mention.start : mention.end] == mention.text
        assert mention.text[-1] not in ".;,"  # edge punctuation is not part of a mention


def test_a_posting_without_skills_gives_an_empty_valid_output() -> None:
    for description in ("", "   ", "We are an equal opportunity employer."):
        mentions = extract_mentions("", description)
        assert mentions == []
        output = skills_output(mentions, "", description)
        assert output == {"skills": [], "ungrounded": []}
        jsonschema.validate(output, SKILL_MENTIONS_SCHEMA)


def test_the_output_has_one_entry_per_mention_with_its_evidence() -> None:
    description = "Use Docker daily. We like docker. Deploy with Kubernetes."
    mentions = [
        Mention("Docker", "knowledge", 4, 10, "tagger"),
        Mention("docker", "knowledge", 26, 32, "tagger"),
        Mention("Kubernetes", "knowledge", 46, 56, "tagger"),
    ]
    output = skills_output(mentions, "", description)
    jsonschema.validate(output, SKILL_MENTIONS_SCHEMA)
    assert [(s["mention"], s["evidence"], s["start"]) for s in output["skills"]] == [
        ("Docker", "Use Docker daily.", 4),
        ("Kubernetes", "Deploy with Kubernetes.", 46),
    ]


def test_taxonomy_candidates_add_labels_the_tagger_missed() -> None:
    matcher = TaxonomyMatcher.from_csv(DEMO_TAXONOMY_PATH)
    extractor = SkillExtractor(SkillTagger.load(), matcher, "tagger+taxonomy")
    text = "Nice to have: teamwork."
    tagged = {m.text for m in SkillExtractor(SkillTagger.load(), None, "tagger").extract("", text)}
    combined = extractor.extract("", text)
    assert "teamwork" not in tagged
    assert [(m.text, m.source) for m in combined if m.text == "teamwork"] == [("teamwork", "taxonomy")]


def test_a_mode_without_what_it_needs_is_a_clear_error() -> None:
    for mode in ("tagger+taxonomy", "tagger+fallback"):
        with pytest.raises(ValueError, match="taxonomy"):
            SkillExtractor(SkillTagger.load(), None, mode)
    with pytest.raises(ValueError, match="mode"):
        SkillExtractor(SkillTagger.load(), None, "magic")


def test_the_shipped_word_clusters_group_words_by_meaning() -> None:
    tagger = SkillTagger.load()
    assert tagger.config.word_clusters and tagger.clusters is not None
    clusters = tagger.clusters

    def coarse(word: str) -> int:
        found = clusters.get(word)
        assert found is not None, word
        return found[0]

    # Words alike in meaning share a coarse cluster, whatever their case; unlike ones do not.
    for one, other in [("PostgreSQL", "mysql"), ("nurse", "nursing"), ("teamwork", "collaboration")]:
        assert coarse(one) == coarse(other), (one, other)
    assert coarse("nurse") != coarse("Kubernetes") != coarse("teamwork")
    assert clusters.get("no-such-word-anywhere") is None


def test_a_model_trained_with_clusters_but_without_its_table_is_a_clear_error(tmp_path: Path) -> None:
    for path in MODEL_DIR.glob(f"{MODEL_NAME}*"):
        if path.name != CLUSTERS_FILE:
            shutil.copy(path, tmp_path / path.name)
    with pytest.raises(FileNotFoundError, match=CLUSTERS_FILE):
        SkillTagger(tmp_path)


def test_a_cluster_table_with_a_bad_line_names_the_line(tmp_path: Path) -> None:
    table = tmp_path / CLUSTERS_FILE
    for bad in ("java\tthree\t18", "java\t3"):
        table.write_text(f"python\t3\t17\n{bad}\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"{CLUSTERS_FILE}:2: expected word"):
            WordClusters.read(table)


def test_a_model_card_from_before_the_clusters_still_loads() -> None:
    card = json.loads((MODEL_DIR / f"{MODEL_NAME}.json").read_text(encoding="utf-8"))
    del card["features"]["word_clusters"]
    assert TaggerCard.from_json(card).word_clusters is False
