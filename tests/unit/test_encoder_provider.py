"""MiniLM on ONNX Runtime: PIPELINE_ENCODER_PROVIDER chooses the execution provider, a provider the
installed onnxruntime lacks is one clear error, and the graph is built once into the cache folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import onnxruntime
import pytest

from pipeline_defs.settings import Settings, SettingsError
from plugins.postings.skills import minilm_onnx
from plugins.postings.skills.embeddings import MINILM_INSTALL_HINT, MINILM_PACKAGE, MiniLMEmbeddings
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
