"""MiniLM on ONNX Runtime: PIPELINE_ENCODER_PROVIDER chooses the execution provider, a provider the
installed onnxruntime lacks is one clear error, the graph is built once into the cache folder, and
PIPELINE_ENCODER_PRECISION's int8 stays near fp32 with its vectors kept apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from pipeline_defs.settings import Settings, SettingsError
from plugins.postings.skills import minilm_onnx
from plugins.postings.skills.embeddings import (
    DEFAULT_PRECISION,
    MINILM_INSTALL_HINT,
    MINILM_PACKAGE,
    MiniLMEmbeddings,
)
from plugins.postings.taxonomy_resource import TaxonomyResource

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(MINILM_PACKAGE) is None,
    reason=f"embedded model not installed: {MINILM_INSTALL_HINT}",
)


def test_the_provider_setting_is_cpu_by_default_and_a_misspelt_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PIPELINE_ENCODER_PROVIDER", raising=False)
    assert Settings.from_env().postings.encoder_provider == "cpu"
    monkeypatch.setenv("PIPELINE_ENCODER_PROVIDER", "CUDA")
    assert Settings.from_env().postings.encoder_provider == "cuda"
    monkeypatch.setenv("PIPELINE_ENCODER_PROVIDER", "gpu")
    with pytest.raises(SettingsError, match="PIPELINE_ENCODER_PROVIDER must be one of cpu, cuda.* not 'gpu'"):
        Settings.from_env()


@needs_minilm
def test_the_setting_selects_the_provider_the_sessions_run_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With a CUDA build of onnxruntime (its provider listed), `cuda` runs the encoder there, the CPU
    behind it for what CUDA does not run; `cpu` runs it on the CPU alone."""
    chosen: list[list[str]] = []
    real_session = onnxruntime.InferenceSession

    def recording_session(model: Any, options: Any, providers: list[str]) -> Any:
        chosen.append(providers)
        return real_session(model, options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", recording_session)
    monkeypatch.setenv("PIPELINE_ENCODER_PROVIDER", "cuda")
    settings = Settings.from_env()
    resource = TaxonomyResource(
        embedding_backend="minilm",
        model_cache_dir=str(tmp_path),
        encoder_provider=settings.postings.encoder_provider,
    )
    encoder = resource.embeddings()
    assert isinstance(encoder, MiniLMEmbeddings)
    assert chosen and all(
        providers == ["CUDAExecutionProvider", "CPUExecutionProvider"] for providers in chosen
    )
    assert encoder.embed_array(["python programming"]).shape == (1, 384)

    chosen.clear()
    MiniLMEmbeddings(cache_dir=tmp_path, provider="cpu")
    assert chosen and all(providers == ["CPUExecutionProvider"] for providers in chosen)


@needs_minilm
def test_a_provider_this_onnxruntime_lacks_is_a_clear_error(tmp_path: Path) -> None:
    assert "CUDAExecutionProvider" not in onnxruntime.get_available_providers()  # this machine's CPU build
    with pytest.raises(ValueError, match="encoder provider 'cuda' is not available") as raised:
        MiniLMEmbeddings(cache_dir=tmp_path, provider="cuda")
    message = str(raised.value)
    assert "\n" not in message
    assert "cpu (CPUExecutionProvider)" in message and "PIPELINE_ENCODER_PROVIDER" in message


@needs_minilm
def test_the_graph_is_built_once_into_the_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    MiniLMEmbeddings(cache_dir=tmp_path)
    built = sorted(path.name for path in (tmp_path / "posting-enrichment").glob("*.onnx"))
    assert len(built) == 2 and all(f"-g{minilm_onnx.GRAPH_VERSION}-" in name for name in built)

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the graph was built again")

    monkeypatch.setattr(minilm_onnx, "bert_graph", no_build)
    assert MiniLMEmbeddings(cache_dir=tmp_path).embed_array(["sql"]).shape == (1, 384)


def test_the_precision_setting_is_fp32_or_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINE_ENCODER_PRECISION", raising=False)
    assert Settings.from_env().postings.encoder_precision == DEFAULT_PRECISION
    monkeypatch.setenv("PIPELINE_ENCODER_PRECISION", "fp32")
    assert Settings.from_env().postings.encoder_precision == "fp32"
    monkeypatch.setenv("PIPELINE_ENCODER_PRECISION", "int4")
    with pytest.raises(SettingsError, match="PIPELINE_ENCODER_PRECISION"):
        Settings.from_env()


@needs_minilm
def test_int8_quantizes_the_taggers_layers_and_keys_its_vectors_apart(tmp_path: Path) -> None:
    """int8 reads a quantized file for the first layers and the float one for the rest; its vectors are
    near fp32's but not equal, so label vectors cached under one precision are never read by the other."""
    fp32 = MiniLMEmbeddings(cache_dir=tmp_path, precision="fp32")
    int8 = MiniLMEmbeddings(cache_dir=tmp_path, precision="int8")
    built = sorted(path.name for path in (tmp_path / "posting-enrichment").glob("*.onnx"))
    assert len(built) == 3, built  # 0-3 in fp32 and int8, 3-6 in fp32 only
    quantized = f"-0-{minilm_onnx.INT8_LAYERS}-int8r{minilm_onnx.INT8_RECIPE}.onnx"
    assert any(name.endswith(quantized) for name in built)
    assert int8.encoder_version != fp32.encoder_version
    texts = ["Experience with Kubernetes and Terraform in production", "care for critically ill patients"]
    near = (fp32.embed_array(texts) * int8.embed_array(texts)).sum(axis=1)
    assert np.all(near > 0.98) and np.all(near < 1 - 1e-6), near
    words = [["Install", "cabling", ",", "switchboards", "and", "lighting"]]
    float_states = fp32.word_states(words, layers=3)[0]
    int8_states = int8.word_states(words, layers=3)[0]
    assert np.abs(float_states - int8_states).mean() < 0.1 * np.abs(float_states).mean()
