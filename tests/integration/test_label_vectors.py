"""The label vectors of a taxonomy: the fast MiniLM encoder computes what the plain one did, a large
taxonomy says up front what its first embedding costs and shows its progress, and the vectors are kept
per label list and encoder version (the second use embeds nothing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from domain.core.progress import ProgressTask, reporting_to
from plugins.postings.skills import skill_resolver
from plugins.postings.skills.embeddings import MINILM_INSTALL_HINT, MINILM_PACKAGE, MiniLMEmbeddings
from plugins.postings.skills.skill_resolver import TIMED_LABELS, SkillResolver, TaxonomyLabelEntry
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, concept_labels, read_taxonomy_csv
from tests.support.minilm_reference import packaged_weights, reference_states, reference_vectors

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(MINILM_PACKAGE) is None,
    reason=f"embedded model not installed: {MINILM_INSTALL_HINT}",
)


def demo_label_texts() -> list[str]:
    concepts, _ = read_taxonomy_csv(DEMO_TAXONOMY_PATH)
    return list(dict.fromkeys(label for concept in concepts for label, _, _ in concept_labels(concept)))


@needs_minilm
def test_the_onnx_encoder_computes_the_vectors_and_token_states_of_the_plain_forward_pass() -> None:
    """Labels of the demo taxonomy (several batches over two threads) and the token states of every
    layer of a few sentences, against the plain NumPy forward pass of the same weights."""
    texts = demo_label_texts()[:96]
    encoder = MiniLMEmbeddings(batch_size=16, threads=2)
    vectors = encoder.embed_array(texts)
    encoder.threads = 1
    one_thread = encoder.embed_array(texts)
    weights = packaged_weights()
    reference = np.concatenate(
        [
            reference_vectors(weights, [encoder.encode(text) for text in texts[start : start + 16]])
            for start in range(0, len(texts), 16)
        ]
    )
    assert vectors.shape == (len(texts), 384)
    assert np.abs(vectors - reference).max() < 1e-5
    assert np.array_equal(vectors, one_thread)  # the threads share the work, not the numbers

    sentences = [["Install", "cabling", ",", "switchboards"], ["We", "offer", "a", "pension", "scheme", "."]]
    states = encoder.word_states(sentences, layers=6, all_layers=True)
    pieces = [encoder.encode(" ".join(words)) for words in sentences]
    expected = reference_states(weights, pieces)
    for row, words in enumerate(sentences):
        assert states[row].shape == (7, len(words), 384)
        # one piece a word in these sentences: a word's state is its piece's, [CLS] first
        if len(pieces[row]) == len(words) + 2:
            for layer in range(7):
                reference_row = expected[layer][row, 1 : len(words) + 1]
                assert np.abs(states[row][layer] - reference_row).max() < 1e-4


def test_the_tokenizer_follows_berts_character_rules() -> None:
    """Uncased WordPiece as BERT's basic tokenizer splits: punctuation apart, accents stripped, control
    characters dropped, tabs and line breaks as spaces."""
    encoder = MiniLMEmbeddings()
    vocabulary = encoder.vocabulary

    def pieces(text: str) -> list[str]:
        return [vocabulary[i] for i in encoder.encode(text)][1:-1]

    assert pieces("Node.js (v18)") == ["node", ".", "j", "##s", "(", "v", "##18", ")"]
    assert pieces("Über café naïve") == pieces("uber cafe naive")
    assert pieces("ta\tb\nnew\rline\x00\x7f") == pieces("ta b new line")
    assert pieces("") == []


class CountingEmbeddings:
    """A stand-in backend: a fixed vector per text, and a count of the texts it was asked for."""

    name = "counting"
    model = "count-1"
    encoder_version = "v7"

    def __init__(self) -> None:
        self.embedded = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [[float(len(text)), 1.0, float(sum(map(ord, text)) % 7)] for text in texts]


class RecordingReporter:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.last: ProgressTask | None = None

    def started(self, task: ProgressTask) -> None:
        self.notes.append(task.note)

    def advanced(self, task: ProgressTask) -> None:
        self.last = task

    def finished(self, task: ProgressTask) -> None:
        self.last = task


def big_resolver(cache_dir: Path, embeddings: CountingEmbeddings) -> SkillResolver:
    count = TIMED_LABELS * 3
    entries = [
        TaxonomyLabelEntry(f"urn:skill:{n}", f"skill number {n}", f"skill number {n}", True)
        for n in range(count)
    ]
    preferred = {entry.concept_uri: entry.label for entry in entries}
    return SkillResolver(entries, preferred, embeddings=embeddings, vector_cache_dir=cache_dir)


def test_a_large_taxonomy_says_what_its_first_embedding_costs_and_is_embedded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(skill_resolver, "NOTE_FROM_SECONDS", 0.0)  # the stand-in backend is instant
    embeddings = CountingEmbeddings()
    reporter = RecordingReporter()
    with reporting_to(reporter):
        vectors = big_resolver(tmp_path, embeddings)._embed_labels(embeddings)
    count = TIMED_LABELS * 3
    assert vectors.shape == (count, 3) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    [note] = reporter.notes
    assert note.startswith(f"embedding {count:,} labels with count-1, about ") and "once per taxonomy" in note
    assert reporter.last is not None and reporter.last.done == reporter.last.total == count
    [kept] = list(tmp_path.iterdir())
    assert kept.name.startswith("counting-count-1-v7-")  # a new encoder version embeds anew

    again = CountingEmbeddings()
    with reporting_to(RecordingReporter()) as quiet:
        assert np.array_equal(big_resolver(tmp_path, again)._embed_labels(again), vectors)
    assert again.embedded == 0 and quiet.notes == []
