"""A span tagger that reads MiniLM's contextual word vectors: a small BiLSTM head with CRF decoding.

Each sentence (the same tokens and sentences as the CRF tagger, `skill_tagger.sentences`) is read
once by the encoder the linker uses (`MiniLMEmbeddings.word_states`, its first `layers` layers);
each token's vector is a learned mix of those layers' states (mean over the token's WordPiece
pieces), with a few surface features MiniLM cannot see (it is uncased: capitals, digits,
punctuation, sentence edges). A projection, a one-layer BiLSTM and a linear layer give emission
scores for two BIO tag sets (skill, knowledge: SkillSpan annotates them separately, and a span
can be both); one linear-chain CRF per kind decodes them (Viterbi), and a mention's score is the
least CRF marginal of its tags, as in the CRF tagger.

Everything here is NumPy: the head's weights (`skill_context_tagger.npz`, float16, about 1 MB)
and its card (`skill_context_tagger.json`) are written by `training/train_context_tagger.py`,
which trains them with torch on SkillSpan train and selects them on SkillSpan dev.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention, Token, tokenize
from plugins.postings.skills.skill_tagger import (
    MODEL_DIR,
    TokenBelief,
    is_punctuation,
    mentions_of_tags,
    sentences,
)

CONTEXT_MODEL_NAME = "skill_context_tagger"
TAGS = ("O", "B", "I")
SURFACE_FEATURES = ("title", "upper", "digit", "punctuation", "first", "last")


def surface_features(words: Sequence[str]) -> np.ndarray:
    """(words, 6) of 0/1: capitalized, all capitals, has a digit, punctuation, first and last word."""
    features = np.zeros((len(words), len(SURFACE_FEATURES)), np.float32)
    for index, word in enumerate(words):
        features[index] = (
            word[:1].isupper(),
            word.isupper() and len(word) > 1,
            any(char.isdigit() for char in word),
            is_punctuation(word),
            index == 0,
            index == len(words) - 1,
        )
    return features


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class ContextHead:
    """The trained head over word vectors: layer mix, projection, BiLSTM, emissions, two CRFs.

    `weights` are the arrays the trainer exports (PyTorch's names and LSTM gate order i, f, g, o).
    """

    def __init__(self, weights: dict[str, np.ndarray], layers: int) -> None:
        self.w = {name: np.asarray(value, np.float32) for name, value in weights.items()}
        self.layers = layers
        mix = self.w["mix.weights"]
        if len(mix) != layers + 1:
            raise ValueError(f"the head mixes {len(mix)} layers' states, the card says {layers} + 1")
        mix = np.exp(mix - mix.max())
        self.mix = (mix / mix.sum() * self.w["mix.gamma"][0]).astype(np.float32)

    def emissions(self, states: np.ndarray, words: Sequence[str]) -> np.ndarray:
        """(2 kinds, words, 3 tags) emission scores of one sentence; `states` is (layers + 1, words, 384)."""
        w = self.w
        mixed = np.tensordot(self.mix, states, axes=1)
        x = np.concatenate([mixed, surface_features(words)], axis=1) @ w["proj.weight"].T + w["proj.bias"]
        x = np.maximum(x, 0.0)
        hidden = np.concatenate([self._lstm(x, ""), self._lstm(x[::-1], "_reverse")[::-1]], axis=1)
        out = hidden @ w["out.weight"].T + w["out.bias"]
        return out.reshape(len(words), len(MENTION_KINDS), len(TAGS)).transpose(1, 0, 2)

    def _lstm(self, x: np.ndarray, suffix: str) -> np.ndarray:
        w = self.w
        inputs = (
            x @ w[f"lstm.weight_ih_l0{suffix}"].T
            + w[f"lstm.bias_ih_l0{suffix}"]
            + w[f"lstm.bias_hh_l0{suffix}"]
        )
        recurrent = w[f"lstm.weight_hh_l0{suffix}"].T
        size = recurrent.shape[0]
        h = np.zeros(size, np.float32)
        c = np.zeros(size, np.float32)
        result = np.empty((len(x), size), np.float32)
        for step in range(len(x)):
            gates = inputs[step] + h @ recurrent
            i, f, o = _sigmoid(gates[:size]), _sigmoid(gates[size : 2 * size]), _sigmoid(gates[3 * size :])
            c = f * c + i * np.tanh(gates[2 * size : 3 * size])
            h = o * np.tanh(c)
            result[step] = h
        return result

    def decode(self, emissions: np.ndarray, kind_index: int) -> tuple[list[str], np.ndarray]:
        """The best tag sequence of one kind (Viterbi) and each token's marginal of each tag."""
        transitions = self.w["crf.transitions"][kind_index]
        start, end = self.w["crf.start"][kind_index], self.w["crf.end"][kind_index]
        scores = emissions[kind_index]
        length = len(scores)
        best = start + scores[0]
        back = np.zeros((length, len(TAGS)), np.int64)
        for step in range(1, length):
            candidates = best[:, None] + transitions
            back[step] = candidates.argmax(axis=0)
            best = candidates.max(axis=0) + scores[step]
        path = [int((best + end).argmax())]
        for step in range(length - 1, 0, -1):
            path.append(int(back[step][path[-1]]))
        path.reverse()
        return [TAGS[tag] for tag in path], self._marginals(scores, transitions, start, end)

    @staticmethod
    def _marginals(
        scores: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> np.ndarray:
        length = len(scores)
        alpha = np.zeros_like(scores)
        beta = np.zeros_like(scores)
        alpha[0] = start + scores[0]
        for step in range(1, length):
            alpha[step] = _logsumexp(alpha[step - 1][:, None] + transitions, axis=0) + scores[step]
        beta[-1] = end
        for step in range(length - 2, -1, -1):
            beta[step] = _logsumexp(transitions + (scores[step + 1] + beta[step + 1])[None, :], axis=1)
        total = _logsumexp(alpha[-1] + end, axis=0)
        return np.exp(alpha + beta - total)


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


class ContextTagger:
    """The trained head and the MiniLM encoder, loaded once; `tag(text)` as `SkillTagger.tag`."""

    def __init__(self, head: ContextHead, encoder: Any, card: dict[str, Any] | None = None) -> None:
        self.head, self.encoder, self.card = head, encoder, card or {}

    @classmethod
    def from_dir(cls, model_dir: Path | str = MODEL_DIR, encoder: Any = None) -> ContextTagger:
        """The model in `model_dir` (card and weights), with `encoder` or else the installed MiniLM."""
        model_dir = Path(model_dir)
        card_path = model_dir / f"{CONTEXT_MODEL_NAME}.json"
        weights_path = model_dir / f"{CONTEXT_MODEL_NAME}.npz"
        for path in (card_path, weights_path):
            if not path.is_file():
                raise FileNotFoundError(
                    f"no context tagger model at {path}: "
                    "train one with `python -m training.train_context_tagger`"
                )
        card = json.loads(card_path.read_text(encoding="utf-8"))
        with np.load(weights_path, allow_pickle=False) as stored:
            head = ContextHead(dict(stored), int(card["encoder"]["layers"]))
        if encoder is None:
            from plugins.postings.skills.embeddings import MiniLMEmbeddings

            encoder = MiniLMEmbeddings()
        return cls(head, encoder, card)

    @classmethod
    def load(cls) -> ContextTagger:
        """The model shipped in the package, with the installed MiniLM."""
        return cls.from_dir(MODEL_DIR)

    def tag(self, text: str, field: str = "description") -> list[Mention]:
        """The skill and knowledge mentions found in `text`, in order, with their offsets."""
        return self.tag_detailed(text, field)[0]

    def tag_detailed(self, text: str, field: str = "description") -> tuple[list[Mention], list[TokenBelief]]:
        """The mentions of `tag`, and for every token how likely it is inside a mention of either kind
        (1 - the CRF marginal of O, the larger of the two kinds): what the fallback reads."""
        tokens = tokenize(text)
        ranges = sentences(tokens, text)
        words = [[token.text for token in tokens[first:end]] for first, end in ranges]
        states = self.encoder.word_states(words, self.head.layers, all_layers=True) if words else []
        mentions: list[Mention] = []
        beliefs: list[TokenBelief] = []
        for (first, end), sentence_states in zip(ranges, states, strict=True):
            found, inside = self._tag_sentence(text, tokens[first:end], sentence_states, field)
            mentions += found
            beliefs += [(t.start, t.end, float(p)) for t, p in zip(tokens[first:end], inside, strict=True)]
        return sorted(mentions, key=lambda m: (m.start, m.end, m.kind)), beliefs

    def tag_sentence(
        self, text: str, sentence: Sequence[Token], states: np.ndarray, field: str = "description"
    ) -> list[Mention]:
        """The mentions of one sentence, given its word states (layers + 1, words, 384)."""
        return self._tag_sentence(text, sentence, states, field)[0]

    def _tag_sentence(
        self, text: str, sentence: Sequence[Token], states: np.ndarray, field: str
    ) -> tuple[list[Mention], np.ndarray]:
        emissions = self.head.emissions(states, [token.text for token in sentence])
        mentions = []
        inside = np.zeros(len(sentence), np.float32)
        for kind_index, kind in enumerate(MENTION_KINDS):
            tags, marginals = self.head.decode(emissions, kind_index)
            inside = np.maximum(inside, 1.0 - marginals[:, 0])
            mentions += mentions_of_tags(
                text, sentence, tags, lambda i, tags=tags, m=marginals: m[i, TAGS.index(tags[i])], kind, field
            )
        return mentions, inside
