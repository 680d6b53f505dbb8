"""The context tagger: MiniLM word vectors, the shipped head, CRF decoding, the fallback on the taxonomy."""

from __future__ import annotations

import itertools
import json
from functools import cache

import numpy as np
import pytest

from plugins.postings.skills.context_tagger import (
    CONTEXT_MODEL_NAME,
    TAGS,
    ContextHead,
    ContextTagger,
    ensemble_weights,
)
from plugins.postings.skills.embeddings import MiniLMEmbeddings
from plugins.postings.skills.mention_grounding import Mention
from plugins.postings.skills.skill_extraction import SkillExtractor, belief
from plugins.postings.skills.skill_tagger import MODEL_DIR
from plugins.postings.skills.taxonomy_matcher import TaxonomyLabel, TaxonomyMatcher
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH

DEMO_POSTINGS = MODEL_DIR.parents[1] / "demo_data" / "postings.jsonl"


@cache
def tagger() -> ContextTagger:
    return ContextTagger.load()


def demo_posting(key: str) -> dict[str, str]:
    for line in DEMO_POSTINGS.read_text(encoding="utf-8").splitlines():
        posting = json.loads(line)
        if posting["key"] == key:
            return posting
    raise KeyError(key)


def found(key: str) -> set[str]:
    posting = demo_posting(key)
    return {m.text for m in tagger().tag(posting["description"])}


def test_the_shipped_model_loads_and_tags_a_known_sentence() -> None:
    mentions = tagger().tag(
        "Strong knowledge of Java and Spring Boot; experience with Docker and Kubernetes."
    )
    kinds = {(m.text, m.kind) for m in mentions}
    assert {("Java", "knowledge"), ("Docker", "knowledge"), ("Kubernetes", "knowledge")} <= kinds
    assert all(m.source == "tagger" and 0 < m.score <= 1 for m in mentions)
    card = tagger().card
    assert card["encoder"]["layers"] == tagger().head.layers
    assert (MODEL_DIR / f"{CONTEXT_MODEL_NAME}.npz").stat().st_size < 5_000_000  # a small file


def test_the_nurse_postings_four_duties_are_found() -> None:
    mentions = found("demo-002")
    for duty in ("care for critically ill patients", "manage ventilators", "administer medication"):
        assert any(duty in mention for mention in mentions), (duty, mentions)
    assert any("accurate records" in mention for mention in mentions), mentions


def test_the_electricians_installation_and_switchboard_work_is_found() -> None:
    mentions = " | ".join(sorted(found("demo-004")))
    assert "install" in mentions and "switchboards" in mentions, mentions


def test_offsets_point_at_the_text_and_empty_text_gives_nothing() -> None:
    text = "You will build APIs in Python and SQL.\n\nExperience with Docker is a plus."
    mentions = tagger().tag(text)
    assert mentions
    for mention in mentions:
        assert text[mention.start : mention.end] == mention.text
        assert mention.text[-1] not in ".;,"
    assert tagger().tag("") == [] and tagger().tag("   \n ") == []


def test_word_states_are_the_same_alone_in_a_batch_and_in_windows() -> None:
    encoder = tagger().encoder
    sentence = ["Install", "cabling", ",", "switchboards", "and", "lighting"]
    other = ["We", "offer", "a", "pension", "scheme"]
    alone = encoder.word_states([sentence], layers=2)[0]
    together = encoder.word_states([other, sentence], layers=2)[1]
    assert alone.shape == (len(sentence), 384)
    np.testing.assert_allclose(alone, together, atol=1e-4)
    layered = encoder.word_states([sentence], layers=2, all_layers=True)[0]
    assert layered.shape == (3, len(sentence), 384)
    np.testing.assert_allclose(layered[-1], alone, atol=1e-4)
    # A sentence longer than the encoder's window is read in windows of whole words: one vector per word.
    long = ["maintenance"] * (MiniLMEmbeddings.max_tokens + 20)
    assert encoder.word_states([long], layers=1)[0].shape == (len(long), 384)


def random_head_weights(rng: np.random.Generator, layers: int = 1, size: int = 4) -> dict[str, np.ndarray]:
    """A head's weights of the trainer's names and shapes (projection 6, LSTM `size` each way)."""
    shapes = {
        "mix.weights": (layers + 1,),
        "mix.gamma": (1,),
        "proj.weight": (6, 384 + 6),
        "proj.bias": (6,),
        "out.weight": (6, 2 * size),
        "out.bias": (6,),
        "crf.transitions": (2, 3, 3),
        "crf.start": (2, 3),
        "crf.end": (2, 3),
    }
    for suffix in ("", "_reverse"):
        shapes |= {
            f"lstm.weight_ih_l0{suffix}": (4 * size, 6),
            f"lstm.weight_hh_l0{suffix}": (4 * size, size),
            f"lstm.bias_ih_l0{suffix}": (4 * size,),
            f"lstm.bias_hh_l0{suffix}": (4 * size,),
        }
    return {name: rng.normal(scale=0.3, size=shape).astype(np.float32) for name, shape in shapes.items()}


def test_an_ensemble_averages_its_members_emissions_and_crfs() -> None:
    rng = np.random.default_rng(3)
    members = [random_head_weights(rng) for _ in range(3)]
    words = [["Install", "cabling", "and", "switchboards"], ["Python"], ["We", "offer", "a", "pension", "."]]
    states = [rng.normal(size=(2, len(sentence), 384)).astype(np.float32) for sentence in words]
    alone = [ContextHead(weights, layers=1) for weights in members]
    ensemble = ContextHead(ensemble_weights(members), layers=1)
    assert len(ensemble.members) == 3 and len(alone[0].members) == 1
    together = ensemble.emissions_batch(states, words)
    for index, sentence in enumerate(words):
        expected = np.mean([head.emissions(states[index], sentence) for head in alone], axis=0)
        assert together[index].shape == (2, len(sentence), 3)
        np.testing.assert_allclose(together[index], expected, atol=1e-5)
    for name in ("crf.transitions", "crf.start", "crf.end"):
        np.testing.assert_allclose(ensemble.w[name], np.mean([m[name] for m in members], axis=0), atol=1e-6)
    with pytest.raises(ValueError, match="numbered from 0"):
        ContextHead({f"m1.{name}": value for name, value in members[0].items()}, layers=1)


def test_crf_decoding_is_the_best_path_and_marginals_are_exact() -> None:
    rng = np.random.default_rng(1)
    hidden = 4
    weights = {
        "mix.weights": np.zeros(2),
        "mix.gamma": np.ones(1),
        "crf.transitions": rng.normal(size=(2, 3, 3)),
        "crf.start": rng.normal(size=(2, 3)),
        "crf.end": rng.normal(size=(2, 3)),
        "proj.weight": np.zeros((hidden, 390)),
        "proj.bias": np.zeros(hidden),
    }
    head = ContextHead(weights, layers=1)
    emissions = rng.normal(size=(2, 4, 3)).astype(np.float32)
    for kind in (0, 1):
        tags, marginals = head.decode(emissions, kind)
        crf = {name: weights[f"crf.{name}"][kind] for name in ("transitions", "start", "end")}

        def score(path: tuple[int, ...], kind: int = kind, crf: dict[str, np.ndarray] = crf) -> float:
            total = crf["start"][path[0]] + crf["end"][path[-1]]
            total += sum(emissions[kind, i, t] for i, t in enumerate(path))
            return total + sum(crf["transitions"][a, b] for a, b in itertools.pairwise(path))

        paths = list(itertools.product(range(3), repeat=4))
        scores = np.array([score(path) for path in paths])
        assert tags == [TAGS[t] for t in paths[int(scores.argmax())]]
        probabilities = np.exp(scores - scores.max())
        probabilities /= probabilities.sum()
        for position in range(4):
            for tag in range(3):
                expected = sum(
                    p for path, p in zip(paths, probabilities, strict=True) if path[position] == tag
                )
                assert marginals[position, tag] == pytest.approx(expected, abs=1e-5)


def test_the_fallback_adds_believed_labels_and_not_plain_words() -> None:
    labels = [
        TaxonomyLabel("kind", "c1", "skill"),
        TaxonomyLabel("access", "c2", "skill"),
        TaxonomyLabel("customer service", "c3", "skill"),
    ]
    matcher = TaxonomyMatcher(labels)
    # The tagger tags nothing here; it believes "Customer service" about 0.45, "kind" and "access" about 0.
    extractor = SkillExtractor(tagger(), matcher, "tagger+fallback", fallback_below=100, fallback_belief=0.3)
    text = "Any kind of work. You get access to the gym. Customer service experience required."
    mentions = extractor.extract("", text)
    texts = {m.text.lower() for m in mentions}
    assert "kind" not in texts and "access" not in texts
    assert any("customer service" in t for t in texts), mentions
    # A posting where the tagger finds enough is left alone.
    plenty = SkillExtractor(tagger(), matcher, "tagger+fallback", fallback_below=0).extract("", text)
    assert plenty == tagger().tag(text)


def test_belief_is_the_highest_among_the_overlapped_tokens() -> None:
    beliefs = [(0, 3, 0.1), (4, 8, 0.6), (9, 12, 0.3)]
    assert belief(Mention("ab cd", "skill", 2, 6, "taxonomy"), beliefs) == 0.6
    assert belief(Mention("z", "skill", 20, 21, "taxonomy"), beliefs) == 0.0


def test_the_demo_taxonomy_fallback_runs_on_a_posting_the_tagger_finds_little_in() -> None:
    matcher = TaxonomyMatcher.from_csv(DEMO_TAXONOMY_PATH)
    extractor = SkillExtractor(tagger(), matcher, "tagger+fallback")
    mentions = extractor.extract("Helper", "Teamwork.")
    texts = [m.text for m in mentions]
    assert len(texts) == len(set(texts))
    assert all(m.field in ("title", "description") for m in mentions)


def test_a_posting_the_tagger_finds_little_in_is_decoded_again_towards_tagging() -> None:
    shipped = tagger()
    snippet = "results orientation with strong write and"  # a Sayfullina train snippet, lower-cased
    long_posting = demo_posting("demo-002")["description"]
    assert shipped.sparse_below >= 1 and shipped.sparse_bias.min() < 0  # the shipped card's rule
    saved = shipped.sparse_below
    try:
        shipped.sparse_below = 0  # the rule off
        plain_snippet, plain_posting = shipped.tag(snippet), shipped.tag(long_posting)
    finally:
        shipped.sparse_below = saved
    # Nothing found: decoded again with the O emission lowered, the soft skill is found.
    assert plain_snippet == []
    assert [m.text for m in shipped.tag(snippet)] == ["results orientation"]
    # A posting with several mentions is decoded once, as without the rule.
    assert len(plain_posting) >= shipped.sparse_below and shipped.tag(long_posting) == plain_posting
    # The rule counts a posting's mentions in its title and description together.
    extractor = SkillExtractor(shipped, None, "tagger")
    title = "Strong knowledge of Java and Spring Boot; experience with Docker and Kubernetes."
    titled = extractor.extract(title, snippet)
    assert len([m for m in titled if m.field == "title"]) >= shipped.sparse_below, titled
    assert [m for m in titled if m.field == "description"] == []


def test_the_shipped_decoding_is_read_from_the_card() -> None:
    decoding = tagger().card.get("decoding", {})
    biases = [decoding.get("o_bias", {}).get(kind, 0.0) for kind in ("skill", "knowledge")]
    assert list(tagger().head.o_bias) == pytest.approx(biases)
    sparse = decoding.get("sparse", {})
    assert tagger().sparse_below == sparse.get("below", 0)
    assert list(tagger().sparse_bias) == pytest.approx(
        [sparse.get("o_bias", {}).get(kind, 0.0) for kind in ("skill", "knowledge")]
    )


def test_the_lstm_on_onnx_runtime_gives_the_numpy_steps_numbers() -> None:
    """The BiLSTM runs on ONNX Runtime's kernel, sentences grouped by length; each sentence's states
    are what stepping through it in NumPy gives (the reverse direction from its own last word)."""
    rng = np.random.default_rng(7)
    head = ContextHead(ensemble_weights([random_head_weights(rng) for _ in range(2)]), layers=1)
    lengths = [5, 1, 30, 12, 9, 64, 65, 3, 17]  # several length groups, a one-word sentence
    x = rng.normal(size=(2, sum(lengths), 6)).astype(np.float32)
    np.testing.assert_allclose(head._bilstm(x, lengths), head.lstm_reference(x, lengths), atol=1e-5)
    shipped = tagger().head
    x = rng.normal(size=(len(shipped.members), sum(lengths), 256)).astype(np.float32)
    np.testing.assert_allclose(shipped._bilstm(x, lengths), shipped.lstm_reference(x, lengths), atol=1e-5)
