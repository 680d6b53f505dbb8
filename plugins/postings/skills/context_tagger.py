"""A span tagger that reads MiniLM's contextual word vectors: a small BiLSTM head with CRF decoding.

Each sentence (the same tokens and sentences as the CRF tagger, `skill_tagger.sentences`) is read
once by the encoder the linker uses (`MiniLMEmbeddings.word_states`, its first `layers` layers);
each token's vector is a learned mix of those layers' states (mean over the token's WordPiece
pieces), with a few surface features MiniLM cannot see (it is uncased: capitals, digits,
punctuation, sentence edges). A projection, a one-layer BiLSTM and a linear layer give emission
scores for two BIO tag sets (skill, knowledge: SkillSpan annotates them separately, and a span
can be both); one linear-chain CRF per kind decodes them (Viterbi), and a mention's score is the
least CRF marginal of its tags, as in the CRF tagger.

Decoding can be biased (a constant on the O emission per kind, from the card's "decoding",
chosen by `training/calibrate_context_tagger.py`): 0 for every posting, and a bias towards
tagging for a posting where fewer than a few mentions are found (`tag_posting`).

The head is NumPy but for its BiLSTM, which runs on ONNX Runtime's LSTM kernel (`lstm_graph`, built
from the weights at load; its steps in C++). The head's weights (`skill_context_tagger.npz`, float16,
about 1 MB) and its card (`skill_context_tagger.json`) are written by
`training/train_context_tagger.py`, which trains them with torch on SkillSpan train and selects them
on SkillSpan dev.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plugins.postings.skills.embeddings import single_blas_thread
from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention, Token, tokenize
from plugins.postings.skills.skill_tagger import (
    CLUSTERS_FILE,
    MODEL_DIR,
    TokenBelief,
    WordClusters,
    is_punctuation,
    mentions_of_tags,
    sentences,
)

CONTEXT_MODEL_NAME = "skill_context_tagger"
READ_AHEAD_POSTINGS = 8  # postings whose sentences are encoded in one batch when a run's wave is known
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


def cluster_ids(words: Sequence[str], clusters: WordClusters) -> np.ndarray:
    """(words, 2): each word's coarse and fine cluster id + 1 (`skill_tagger.WordClusters`), 0 for none."""
    ids = np.zeros((len(words), 2), np.int64)
    for index, word in enumerate(words):
        found = clusters.get(word)
        if found is not None:
            ids[index] = (found[0] + 1, found[1] + 1)
    return ids


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class ContextHead:
    """The trained head over word vectors: layer mix, projection, BiLSTM, emissions, two CRFs.

    `weights` are the arrays the trainer exports (PyTorch's names and LSTM gate order i, f, g, o).
    An ensemble's weights are several heads' under the prefixes "m0.", "m1.", ... (heads trained
    with different seeds): their emission scores and CRF parameters are averaged (the mean of the
    members' log-potentials, one CRF decodes them), and their LSTMs step through the sentences
    together. MiniLM's states are read once for all members.
    """

    def __init__(
        self, weights: dict[str, np.ndarray], layers: int, clusters: WordClusters | None = None
    ) -> None:
        self.members = member_weights(
            {name: np.asarray(value, np.float32) for name, value in weights.items()}
        )
        self.layers = layers
        self.clusters = clusters
        mixes = []
        for w in self.members:
            if ("cluster.coarse" in w) != (clusters is not None):
                raise ValueError(
                    "the head's weights and the word cluster table go together: give both or neither"
                )
            mix = w["mix.weights"]
            if len(mix) != layers + 1:
                raise ValueError(f"the head mixes {len(mix)} layers' states, the card says {layers} + 1")
            mix = np.exp(mix - mix.max())
            mixes.append((mix / mix.sum() * w["mix.gamma"][0]).astype(np.float32))
        self.mixes = np.stack(mixes)  # (members, layers + 1)
        # One CRF per kind: the members' parameters averaged (with one member, its own).
        self.w = {
            name: np.mean([w[name] for w in self.members], axis=0)
            for name in ("crf.transitions", "crf.start", "crf.end")
        }
        # The members' projection, LSTM and output weights stacked (members first).
        self.stacked = {
            name: np.stack([w[name] for w in self.members])
            for name in self.members[0]
            if name.startswith(("proj.", "lstm.", "out."))
        }
        # Added to each kind's "O" emission when decoding (negative: more mentions); the card's
        # "decoding" (`training/calibrate_context_tagger.py`) sets it, and the sparse rule's.
        self.o_bias = np.zeros(len(MENTION_KINDS), np.float32)
        self._lstm_session: Any = None  # built at the first emissions (a head without an LSTM has none)

    @property
    def mix(self) -> np.ndarray:
        """The first member's layer mix (layers + 1,)."""
        return self.mixes[0]

    def emissions(self, states: np.ndarray, words: Sequence[str]) -> np.ndarray:
        """(2 kinds, words, 3 tags) emission scores of one sentence; `states` is (layers + 1, words, 384)."""
        return self.emissions_batch([states], [words])[0]

    def emissions_batch(
        self, states: Sequence[np.ndarray], words: Sequence[Sequence[str]]
    ) -> list[np.ndarray]:
        """`emissions` of several sentences at once (the LSTM steps through them side by side; an
        ensemble's members too): the members' mean."""
        s = self.stacked
        lengths = [len(sentence) for sentence in words]
        if not lengths or sum(lengths) == 0:
            return [np.zeros((len(MENTION_KINDS), 0, len(TAGS)), np.float32) for _ in lengths]
        # (layers + 1, words, 384) of all sentences, mixed per member: (members, words, 384)
        layered = np.concatenate(list(states), axis=1)
        mixed = np.tensordot(self.mixes, layered.astype(np.float32, copy=False), axes=1)
        surface = np.concatenate([surface_features(sentence) for sentence in words])
        parts = [mixed, np.broadcast_to(surface, (len(self.members), *surface.shape))]
        if self.clusters is not None:
            ids = np.concatenate([cluster_ids(sentence, self.clusters) for sentence in words])
            parts += [
                np.stack([w["cluster.coarse"][ids[:, 0]] for w in self.members]),
                np.stack([w["cluster.fine"][ids[:, 1]] for w in self.members]),
            ]
        features = np.concatenate(parts, axis=2)
        x = np.maximum(
            np.matmul(features, s["proj.weight"].transpose(0, 2, 1)) + s["proj.bias"][:, None], 0.0
        )
        hidden = self._bilstm(x, lengths)  # (members, words, 2 * size)
        out = np.matmul(hidden, s["out.weight"].transpose(0, 2, 1)) + s["out.bias"][:, None]
        out = out.mean(axis=0).reshape(-1, len(MENTION_KINDS), len(TAGS))
        offsets = np.cumsum([0, *lengths])
        return [out[offsets[i] : offsets[i + 1]].transpose(1, 0, 2) for i in range(len(lengths))]

    def _bilstm(self, x: np.ndarray, lengths: list[int]) -> np.ndarray:
        """Both LSTM directions of every member over the sentences, on ONNX Runtime's LSTM kernel (its
        steps in C++: the NumPy loop over steps, `lstm_reference`, was half the tagger's CPU outside
        the encoder); `x` is (members, words, input) of all sentences; returns (members, words, 2 size)."""
        if self._lstm_session is None:
            from plugins.postings.skills.minilm_onnx import session

            self._lstm_session = session(lstm_graph(self.stacked).SerializeToString())
        size = self.stacked["lstm.weight_hh_l0"].shape[2]
        hidden = np.empty((x.shape[0], x.shape[1], 2 * size), np.float32)
        starts = np.cumsum([0, *lengths])[:-1]
        # Sentences of about one length run together (lengths up to 8, 16, 32, ...): each step runs every
        # sentence of its call, and a posting's 60 sentences of 1-50 words padded to the longest were
        # 4.2 times the words (SkillSpan dev)
        buckets: dict[int, list[int]] = {}
        for index, length in enumerate(lengths):
            if length:
                buckets.setdefault(max(8, 1 << (length - 1).bit_length()), []).append(index)
        for group in buckets.values():
            sizes = [lengths[i] for i in group]
            row = np.repeat(np.arange(len(group)), sizes)  # each word's row and step in the call
            step = np.concatenate([np.arange(length) for length in sizes])
            token = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in group])
            padded = np.zeros((x.shape[0], max(sizes), len(group), x.shape[2]), np.float32)
            padded[:, step, row] = x[:, token]
            [y] = self._lstm_session.run(
                ["y"], {"x": padded, "lengths": np.asarray(sizes, np.int32)}
            )  # (members, steps, 2 directions, sentences, size)
            hidden[:, token] = np.concatenate([y[:, step, 0, row], y[:, step, 1, row]], axis=2)
        return hidden

    def lstm_reference(self, x: np.ndarray, lengths: list[int]) -> np.ndarray:
        """`_bilstm` in NumPy, step by step: what the ONNX Runtime kernel is checked against."""
        forward = self._lstm(x, lengths, "", reverse=False)
        backward = self._lstm(x, lengths, "_reverse", reverse=True)
        return np.concatenate([forward, backward], axis=2)

    def _lstm(self, x: np.ndarray, lengths: list[int], suffix: str, reverse: bool) -> np.ndarray:
        """One LSTM direction of every member over the sentences side by side (each starts at step 0;
        a finished one idles); `x` is (members, words, input) of all sentences; returns
        (members, words, size)."""
        s = self.stacked
        recurrent = s[f"lstm.weight_hh_l0{suffix}"].transpose(0, 2, 1)  # (members, size, 4 size)
        members, size = recurrent.shape[0], recurrent.shape[1]
        inputs_all = np.matmul(x, s[f"lstm.weight_ih_l0{suffix}"].transpose(0, 2, 1))
        inputs_all += (s[f"lstm.bias_ih_l0{suffix}"] + s[f"lstm.bias_hh_l0{suffix}"])[:, None]
        batch, steps = len(lengths), max(lengths)
        # Each (sentence, step)'s token: step t reads token t (forward) or its sentence's last - t.
        offsets = np.cumsum([0, *lengths])[:-1]
        length_array = np.array(lengths)
        step_index = np.arange(steps)[None, :]
        live = step_index < length_array[:, None]
        token = np.where(reverse, length_array[:, None] - 1 - step_index, step_index) + offsets[:, None]
        token = np.where(live, token, 0)
        inputs = inputs_all[:, token]  # (members, batch, steps, 4 size); past a sentence's end: ignored
        h = np.zeros((members, batch, size), np.float32)
        c = np.zeros((members, batch, size), np.float32)
        result = np.empty((members, batch, steps, size), np.float32)
        for step in range(steps):
            gates = inputs[:, :, step] + np.matmul(h, recurrent)
            sigmoid = _sigmoid(gates)
            c = sigmoid[..., size : 2 * size] * c + sigmoid[..., :size] * np.tanh(
                gates[..., 2 * size : 3 * size]
            )
            h = sigmoid[..., 3 * size :] * np.tanh(c)
            result[:, :, step] = h
        output = np.empty((members, int(length_array.sum()), size), np.float32)
        output[:, token[live]] = result[:, live]
        return output

    def decode(self, emissions: np.ndarray, kind_index: int) -> tuple[list[str], np.ndarray]:
        """The best tag sequence of one kind (Viterbi) and each token's marginal of each tag."""
        tags, marginals = self.decode_batch([emissions], kind_index)
        return tags[0], marginals[0]

    def decode_batch(
        self, emissions: Sequence[np.ndarray], kind_index: int, o_bias: float | None = None
    ) -> tuple[list[list[str]], list[np.ndarray]]:
        """`decode` of several sentences at once: Viterbi and forward-backward step through them side by
        side; past its end a sentence's scores stand still. `o_bias` (default: this kind's `o_bias`)
        is added to the O emission of every token first."""
        transitions = self.w["crf.transitions"][kind_index]
        start, end = self.w["crf.start"][kind_index], self.w["crf.end"][kind_index]
        lengths = np.array([e.shape[1] for e in emissions])
        batch, steps, tags = len(emissions), int(lengths.max()), len(TAGS)
        scores = np.zeros((batch, steps, tags), np.float32)
        for row, sentence in enumerate(emissions):
            scores[row, : lengths[row]] = sentence[kind_index]
        scores[:, :, 0] += self.o_bias[kind_index] if o_bias is None else o_bias
        # Viterbi; a finished sentence keeps its scores and points back to the same tag.
        best = start + scores[:, 0]
        back = np.tile(np.arange(tags), (batch, steps, 1))
        alpha = np.empty((batch, steps, tags), np.float32)
        alpha[:, 0] = best
        for step in range(1, steps):
            live = (step < lengths)[:, None]
            candidates = best[:, :, None] + transitions
            back[:, step] = np.where(live, candidates.argmax(axis=1), back[:, step])
            best = np.where(live, candidates.max(axis=1) + scores[:, step], best)
            forward = _logsumexp(alpha[:, step - 1, :, None] + transitions, axis=1) + scores[:, step]
            alpha[:, step] = np.where(live, forward, alpha[:, step - 1])
        path = np.empty((batch, steps), np.int64)
        path[:, -1] = (best + end).argmax(axis=1)
        for step in range(steps - 1, 0, -1):
            path[:, step - 1] = back[np.arange(batch), step, path[:, step]]
        # Backward pass: beta is `end` at a sentence's last token (and past it).
        beta = np.empty((batch, steps, tags), np.float32)
        beta[:, -1] = end
        for step in range(steps - 2, -1, -1):
            backward = _logsumexp(transitions + (scores[:, step + 1] + beta[:, step + 1])[:, None, :], axis=2)
            beta[:, step] = np.where((step + 1 < lengths)[:, None], backward, end)
        total = _logsumexp(alpha[:, -1] + end, axis=1)
        marginals = np.exp(alpha + beta - total[:, None, None])
        return (
            [[TAGS[tag] for tag in path[row, :length]] for row, length in enumerate(lengths)],
            [marginals[row, :length] for row, length in enumerate(lengths)],
        )


def lstm_graph(stacked: dict[str, np.ndarray]) -> Any:
    """The members' bidirectional LSTMs as one ONNX graph: input `x` (members, steps, sentences, input)
    padded, `lengths` (sentences,) int32; output `y` (members, steps, 2, sentences, size), zero past a
    sentence's end; the reverse direction runs from each sentence's own last word."""
    from onnx import TensorProto, helper, numpy_helper

    members, size = stacked["lstm.weight_hh_l0"].shape[:2]
    size //= 4
    gate_order = (0, 3, 1, 2)  # PyTorch's gates i, f, g, o as ONNX's i, o, f, c

    def gates(matrix: np.ndarray) -> np.ndarray:
        return np.concatenate([matrix[k * size : (k + 1) * size] for k in gate_order])

    def directions(member: int, name: str) -> np.ndarray:
        return np.stack([gates(stacked[f"lstm.{name}{suffix}"][member]) for suffix in ("_l0", "_l0_reverse")])

    nodes, initializers, outputs = [], [], []
    for member in range(members):
        m = f"m{member}"
        bias = np.concatenate([directions(member, "bias_ih"), directions(member, "bias_hh")], axis=1)
        for name, value in (
            (f"{m}_index", np.array(member, np.int64)),
            (f"{m}_w", directions(member, "weight_ih")),
            (f"{m}_r", directions(member, "weight_hh")),
            (f"{m}_b", bias),
        ):
            kind = np.float32 if value.ndim else np.int64  # the member's index is a scalar
            initializers.append(numpy_helper.from_array(np.array(value, kind), name))
        nodes.append(helper.make_node("Gather", ["x", f"{m}_index"], [f"{m}_x"], axis=0))
        nodes.append(
            helper.make_node(
                "LSTM",
                [f"{m}_x", f"{m}_w", f"{m}_r", f"{m}_b", "lengths"],
                [f"{m}_y"],
                direction="bidirectional",
                hidden_size=int(size),
            )
        )
        nodes.append(helper.make_node("Unsqueeze", [f"{m}_y", "first_axis"], [f"{m}_y1"]))
        outputs.append(f"{m}_y1")
    initializers.append(numpy_helper.from_array(np.array([0], np.int64), "first_axis"))
    nodes.append(helper.make_node("Concat", outputs, ["y"], axis=0))
    graph = helper.make_graph(
        nodes,
        "context tagger BiLSTM",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [members, "steps", "sentences", "input"]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["sentences"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [members, "steps", 2, "sentences", size])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def member_weights(weights: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """An ensemble's weights ("m0.proj.weight", ...) split per member; a single head's as one member."""
    members: dict[int, dict[str, np.ndarray]] = {}
    for name, value in weights.items():
        found = re.fullmatch(r"m(\d+)\.(.+)", name)
        if found is None:
            if members:
                raise ValueError(f"an ensemble's weight {name!r} belongs to no member")
            return [weights]
        members.setdefault(int(found[1]), {})[found[2]] = value
    if sorted(members) != list(range(len(members))):
        raise ValueError(f"ensemble members {sorted(members)} are not numbered from 0")
    return [members[index] for index in range(len(members))]


def ensemble_weights(heads: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Several heads' weights as one ensemble's (the names `ContextHead` reads)."""
    return {f"m{index}.{name}": value for index, head in enumerate(heads) for name, value in head.items()}


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


class ContextTagger:
    """The trained head and the MiniLM encoder, loaded once; `tag(text)` as `SkillTagger.tag`."""

    def __init__(self, head: ContextHead, encoder: Any, card: dict[str, Any] | None = None) -> None:
        self.head, self.encoder, self.card = head, encoder, card or {}
        decoding = self.card.get("decoding", {})
        self.head.o_bias = kind_biases(decoding.get("o_bias", {}))
        # The sparse rule: a posting where fewer than `sparse_below` mentions are found is decoded
        # again with `sparse_bias` on the O emission (negative: towards tagging). Short texts (one
        # sentence, a soft skill or two) are where the head under-tags; a posting where it finds
        # several mentions is left as it is. Off (0) unless the card chose it.
        sparse = decoding.get("sparse", {})
        self.sparse_below = int(sparse.get("below", 0))
        self.sparse_bias = kind_biases(sparse.get("o_bias", {}))
        self._expected: deque[str] = deque()  # texts `tag_posting` will be asked for next (`expect`)
        self._read_ahead: dict[str, tuple[list[Sequence[Token]], list[np.ndarray]]] = {}

    def expect(self, postings: Sequence[Sequence[tuple[str, str]]]) -> None:
        """The postings (each its (field, text) pairs) `tag_posting` is about to be asked for, in order.
        Their sentences are then encoded `READ_AHEAD_POSTINGS` postings at a time, in one batch: the
        encoder pads sentences of similar length together, and several postings' sentences pad less
        (measured: a third less encoder CPU a posting with 12 postings a call than with one)."""
        self._expected = deque(text for fields in postings for _, text in fields if text.strip())
        self._read_ahead.clear()

    @classmethod
    def from_dir(cls, model_dir: Path | str = MODEL_DIR, encoder: Any = None) -> ContextTagger:
        """The model in `model_dir` (card and weights), with `encoder` or else the process's MiniLM."""
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
        clusters = None
        if card.get("word_clusters"):
            clusters = WordClusters.read(model_dir / CLUSTERS_FILE)
        with np.load(weights_path, allow_pickle=False) as stored:
            head = ContextHead(dict(stored), int(card["encoder"]["layers"]), clusters)
        if encoder is None:
            from plugins.postings.skills.embeddings import shared_minilm

            encoder = shared_minilm()
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
        (1 - the CRF marginal of O, the larger of the two kinds): what the fallback reads. `text` is
        the whole posting, as for the sparse rule (`tag_posting`)."""
        return self.tag_posting([(field, text)])[field]

    def tag_posting(
        self, fields: Sequence[tuple[str, str]]
    ) -> dict[str, tuple[list[Mention], list[TokenBelief]]]:
        """`tag_detailed` of each (field, text) of one posting (its title and description); where fewer
        than `sparse_below` mentions are found in them all, each field's mentions decoded again with
        `sparse_bias` (MiniLM and the LSTM are not run again: the same emissions, decoded once more)."""
        read = {field: self._read(text) for field, text in fields}
        with single_blas_thread():
            decoded = {field: self._decode(text, *read[field], field) for field, text in fields}
            if sum(len(found) for found, _ in decoded.values()) < self.sparse_below:
                # The mentions of the biased decoding; the beliefs stay the model's own (the biased
                # marginals are inflated on purpose, and the fallback's threshold was set on these).
                decoded = {
                    field: (self._decode(text, *read[field], field, self.sparse_bias)[0], decoded[field][1])
                    for field, text in fields
                }
        return decoded

    def _read(self, text: str) -> tuple[list[Sequence[Token]], list[np.ndarray]]:
        """The sentences of `text` (as tokens) and their emissions."""
        if text not in self._read_ahead and text in self._expected:
            self._read_together(text)
        sentence_tokens, states = self._read_ahead.pop(text, None) or self._encoded([text])[0]
        if not sentence_tokens:
            return [], []
        words = [[token.text for token in sentence] for sentence in sentence_tokens]
        with single_blas_thread():  # small matrices: BLAS threads only wait for each other
            return sentence_tokens, self.head.emissions_batch(states, words)

    def _read_together(self, text: str) -> None:
        """Encode `text` and the texts expected after it (`READ_AHEAD_POSTINGS` postings' worth) at once."""
        while self._expected and self._expected[0] != text:  # texts skipped (no call for them came)
            self._expected.popleft()
        texts = [self._expected.popleft() for _ in range(min(len(self._expected), 2 * READ_AHEAD_POSTINGS))]
        self._read_ahead = dict(zip(texts, self._encoded(texts), strict=True))

    def _encoded(self, texts: Sequence[str]) -> list[tuple[list[Sequence[Token]], list[np.ndarray]]]:
        """Each text's sentences (as tokens) and their word states, all texts' sentences in one batch."""
        per_text = []
        for text in texts:
            tokens = tokenize(text)
            per_text.append([tokens[first:end] for first, end in sentences(tokens, text)])
        words = [
            [token.text for token in sentence] for sentence_tokens in per_text for sentence in sentence_tokens
        ]
        with single_blas_thread():
            states = self.encoder.word_states(words, self.head.layers, all_layers=True) if words else []
        result, start = [], 0
        for sentence_tokens in per_text:
            result.append((sentence_tokens, states[start : start + len(sentence_tokens)]))
            start += len(sentence_tokens)
        return result

    def _decode(
        self,
        text: str,
        sentence_tokens: list[Sequence[Token]],
        emissions: list[np.ndarray],
        field: str,
        o_bias: np.ndarray | None = None,
    ) -> tuple[list[Mention], list[TokenBelief]]:
        if not sentence_tokens:
            return [], []
        found, inside = self.decode_sentences(text, sentence_tokens, emissions, field, o_bias)
        beliefs = [
            (token.start, token.end, float(p))
            for sentence, sentence_inside in zip(sentence_tokens, inside, strict=True)
            for token, p in zip(sentence, sentence_inside, strict=True)
        ]
        return sorted(found, key=lambda m: (m.start, m.end, m.kind)), beliefs

    def tag_sentence(
        self, text: str, sentence: Sequence[Token], states: np.ndarray, field: str = "description"
    ) -> list[Mention]:
        """The mentions of one sentence, given its word states (layers + 1, words, 384)."""
        return self._tag_sentences(text, [sentence], [states], field)[0]

    def tag_sentences(
        self,
        text: str,
        sentences_: Sequence[Sequence[Token]],
        states: Sequence[np.ndarray],
        field: str = "description",
    ) -> list[Mention]:
        """The mentions of several sentences of `text`, given their word states."""
        return self._tag_sentences(text, sentences_, states, field)[0]

    def _tag_sentences(
        self, text: str, sentences_: Sequence[Sequence[Token]], states: Sequence[np.ndarray], field: str
    ) -> tuple[list[Mention], list[np.ndarray]]:
        emissions = self.head.emissions_batch(states, [[token.text for token in s] for s in sentences_])
        return self.decode_sentences(text, sentences_, emissions, field)

    def decode_sentences(
        self,
        text: str,
        sentences_: Sequence[Sequence[Token]],
        emissions: Sequence[np.ndarray],
        field: str,
        o_bias: np.ndarray | None = None,
    ) -> tuple[list[Mention], list[np.ndarray]]:
        """The mentions of sentences given their emissions (decoded with `o_bias` per kind, default the
        head's), and each token's belief of being inside one."""
        mentions: list[Mention] = []
        inside = [np.zeros(len(sentence), np.float32) for sentence in sentences_]
        for kind_index, kind in enumerate(MENTION_KINDS):
            all_tags, all_marginals = self.head.decode_batch(
                emissions, kind_index, None if o_bias is None else float(o_bias[kind_index])
            )
            for row, (sentence, tags, marginals) in enumerate(
                zip(sentences_, all_tags, all_marginals, strict=True)
            ):
                inside[row] = np.maximum(inside[row], 1.0 - marginals[:, 0])
                mentions += mentions_of_tags(
                    text,
                    sentence,
                    tags,
                    lambda i, tags=tags, m=marginals: m[i, TAGS.index(tags[i])],
                    kind,
                    field,
                )
        return mentions, inside


def kind_biases(by_kind: dict[str, float]) -> np.ndarray:
    """A card's {"skill": b, "knowledge": b} as an array in `MENTION_KINDS` order (missing: 0)."""
    return np.array([float(by_kind.get(kind, 0.0)) for kind in MENTION_KINDS], np.float32)
