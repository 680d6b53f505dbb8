"""A posting is encoded once: the context tagger reads its sentences, the linker's sentence and mention
queries and the faithfulness check read those encodings (in the process, and on the daemon path from
the vector store in another process) instead of running MiniLM over the same text again."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from plugins.postings.quality.faithfulness import Evidence, FaithfulnessChecker
from plugins.postings.skills import skill_extraction
from plugins.postings.skills.concept_reranker import load_linker_model
from plugins.postings.skills.embeddings import MINILM_INSTALL_HINT, MINILM_PACKAGE, MiniLMEmbeddings
from plugins.postings.skills.skill_resolver import SkillResolver, TaxonomyLabelEntry
from plugins.postings.store.taxonomy import (
    DEMO_TAXONOMY_PATH,
    concept_labels,
    read_taxonomy_csv,
)
from plugins.postings.use_cases.posting_skills import final_skills, find_candidates

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(MINILM_PACKAGE) is None,
    reason=f"embedded model not installed: {MINILM_INSTALL_HINT}",
)
DEMO_POSTINGS = DEMO_TAXONOMY_PATH.parent / "postings.jsonl"


def nurse_posting() -> dict[str, str]:
    for line in DEMO_POSTINGS.read_text(encoding="utf-8").splitlines():
        posting = json.loads(line)
        if posting["key"] == "demo-002":
            return posting
    raise KeyError("demo-002")


def demo_resolver(encoder: MiniLMEmbeddings) -> SkillResolver:
    concepts, _ = read_taxonomy_csv(DEMO_TAXONOMY_PATH)
    entries, preferred = [], {}
    for concept in concepts:
        preferred[concept.concept_uri] = concept.preferred_label
        for label, normalized, is_preferred in concept_labels(concept):
            entries.append(TaxonomyLabelEntry(concept.concept_uri, label, normalized, is_preferred))
    resolver = SkillResolver(entries, preferred, embeddings=encoder, linker=load_linker_model())
    resolver.label_index()  # the label vectors: a taxonomy's, encoded apart and kept per version
    return resolver


def posting_skills(posting: dict[str, str]) -> list[dict[str, str]]:
    """posting_skills' chain as a run calls it (the linker on MiniLM configured): its stored skills."""
    taxonomy = SimpleNamespace(embedding_backend="minilm", taxonomy_path=lambda: DEMO_TAXONOMY_PATH)
    context = SimpleNamespace(resources=SimpleNamespace(taxonomy=taxonomy))
    candidates = find_candidates(posting, context)
    return final_skills({**posting, "candidates": candidates}, context)["skills"]


def test_the_tagger_the_linker_and_the_faithfulness_check_encode_a_posting_once() -> None:
    posting = nurse_posting()
    encoder = skill_extraction._shipped("context").tagger.encoder  # the process's MiniLM, as in a run
    resolver = demo_resolver(encoder)
    encoder.encoded = Counter()

    skills = posting_skills(posting)
    assert skills
    for skill in skills:  # skill_entities
        resolver.resolve(skill["mention"], context=skill["evidence"])
    checker = FaithfulnessChecker(embedder=encoder)  # a summary naming the posting's role
    checker.similarities(["critical care nurse"], Evidence.of(posting))

    sentences = {skill["evidence"] for skill in skills}
    assert encoder.encoded, "nothing was encoded"
    assert max(encoder.encoded.values()) == 1, "a text went through the encoder twice"
    for sentence in sentences:
        assert encoder.encoded[key_of(encoder, sentence)] == 1, sentence


def test_on_the_daemon_path_the_linker_reads_the_vectors_posting_skills_stored(tmp_path: Path) -> None:
    """posting_skills and skill_entities run in different processes: the second reads the sentence and
    mention vectors from the machine's vector store and encodes none of them."""
    posting = nurse_posting()
    store = tmp_path / "vectors.sqlite"
    skills_process = MiniLMEmbeddings(vector_store=store)
    tagger = skill_extraction._shipped("context").tagger
    shared, tagger.encoder = tagger.encoder, skills_process
    try:
        skills = posting_skills(posting)
    finally:
        tagger.encoder = shared
    entities_process = MiniLMEmbeddings(vector_store=store)
    resolver = demo_resolver(entities_process)
    entities_process.encoded = Counter()
    resolutions = [resolver.resolve(s["mention"], context=s["evidence"]) for s in skills]

    assert resolutions and not entities_process.encoded, "skill_entities encoded what posting_skills had"
    # and what it read is what encoding it there would give
    sentence = skills[0]["evidence"]
    fresh = MiniLMEmbeddings().embed_array([sentence])[0]
    assert np.abs(entities_process.query_array([sentence])[0] - fresh).max() < 1e-5


def key_of(encoder: MiniLMEmbeddings, text: str) -> bytes:
    return np.asarray(encoder.encode(text), np.int32).tobytes()
