"""The postings plugin's section of the configuration (read by `pipeline_defs/settings.py`, the one reader;
declared here, beside the plugin). In a config file these are the keys of the `[postings]` table."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.core.configuration import (
    Derived,
    SettingError,
    name_list,
    one_of,
    setting,
    text,
    whole_number,
)

SUMMARY_STYLES = ("plain", "refined")
SKILLS_STYLES = ("tagger", "tagger+llm", "llm")
LINK_STYLES = ("linker", "linker+llm")
EMBEDDING_BACKENDS = ("none", "minilm", "ollama")
SERVER_BACKENDS = ("ollama", "openai")


# ONNX Runtime's execution providers by short name (plugins/postings/skills/minilm_onnx.py has the same).
ENCODER_PROVIDERS = ("cpu", "cuda", "tensorrt", "rocm", "migraphx", "dml", "coreml", "openvino")
ENCODER_PRECISIONS = ("fp32", "int8")  # minilm_onnx.PRECISIONS


def encoder_provider(value: str) -> str:
    """A short provider name, or a full ONNX Runtime one ("CUDAExecutionProvider"); whether this machine's
    onnxruntime has it is checked when the encoder loads (importing it here would slow every command)."""
    value = value.strip()
    if value.lower() in ENCODER_PROVIDERS:
        return value.lower()
    if value.endswith("ExecutionProvider") and value.isidentifier():
        return value
    raise SettingError(
        f"must be one of {', '.join(ENCODER_PROVIDERS)} or an ONNX Runtime provider name "
        f"(...ExecutionProvider), not {value!r}"
    )


def _minilm_installed(values: Mapping[str, Any]) -> str:
    """`minilm` (semantic linking in process) when its weights package is installed, else `none`."""
    return "minilm" if importlib.util.find_spec("all_minilm_l6_v2") is not None else "none"


def _llm_style(styles: tuple[str, ...], model_field: str) -> Derived:
    """A use case's style: its LLM style (the second) on a model server when its model is set, else its
    CPU style (the first)."""

    def style(values: Mapping[str, Any]) -> str:
        on_server = values.get("llm_backend") in SERVER_BACKENDS and values.get(model_field)
        return styles[1] if on_server else styles[0]

    return Derived(style, f"`{styles[0]}`; `{styles[1]}` on a model server when its model is set")


@dataclass(frozen=True)
class PostingsSettings:
    taxonomy_path: str = setting(
        "PIPELINE_TAXONOMY_PATH",
        "a skills taxonomy in ESCO's `skills_en.csv` format, e.g. "
        "`../shared/data/esco/skills_en_v1.1.1.csv`; unset: the built-in demo taxonomy (~100 concepts)",
        "",
        parse=text,
    )
    embedding_backend: str = setting(
        "PIPELINE_EMBEDDING_BACKEND",
        "`minilm` adds the semantic stage of skill resolution in process (all-MiniLM-L6-v2, installed by "
        "`make`; label vectors cached in the data directory); `ollama` uses Ollama's embed API on "
        "OLLAMA_HOST; `none` leaves it out",
        Derived(_minilm_installed, "`minilm` when its package is installed, else `none`"),
        parse=one_of(*EMBEDDING_BACKENDS),
    )
    embedding_model: str = setting(
        "PIPELINE_EMBEDDING_MODEL", "the Ollama embedding model (`ollama` backend)", "nomic-embed-text"
    )
    encoder_provider: str = setting(
        "PIPELINE_ENCODER_PROVIDER",
        "where MiniLM (the context tagger's and the linker's encoder, ONNX Runtime) runs: `cpu`, or a GPU's "
        "execution provider (`cuda`, `tensorrt`, `rocm`, `migraphx`, `dml`, `coreml`, `openvino`, or a full "
        "ONNX Runtime provider name) when the installed onnxruntime build has it (e.g. `onnxruntime-gpu` "
        "for `cuda`); one it lacks is an error naming those it has",
        "cpu",
        parse=encoder_provider,
    )
    encoder_precision: str = setting(
        "PIPELINE_ENCODER_PRECISION",
        "MiniLM's arithmetic: `fp32`, or `int8`: the first three layers' weight products quantized (the "
        "context tagger's encoder about 1.8x cheaper; the taxonomy's label vectors computed once more; "
        "sentence-level linking MRR up to 0.01 lower, see below)",
        "fp32",
        parse=one_of(*ENCODER_PRECISIONS),
    )
    summary_style: str = setting(
        "PIPELINE_SUMMARY_STYLE",
        "`refined`: the summary as a multi-step chain (extract, grade, improve, final)",
        "plain",
        parse=one_of(*SUMMARY_STYLES),
    )
    skills_tagger: str = setting(
        "PIPELINE_SKILLS_TAGGER",
        "which tagger finds skills: `context` (MiniLM's contextual vectors and a BiLSTM-CRF head: better, "
        "~0.4 s of CPU a posting) or `crf` (the earlier CRF, ~0.1 s)",
        Derived(
            lambda values: "context" if _minilm_installed(values) == "minilm" else "crf",
            "`context` when MiniLM's package is installed (`make` does it), else `crf`",
        ),
        parse=one_of("context", "crf"),
    )
    skills_verify_model: str = setting(
        "PIPELINE_SKILLS_VERIFY_MODEL",
        "the model that verifies the tagger's unsure mentions (`tagger+llm`)",
        Derived(lambda values: values.get("model") or "", "PIPELINE_MODEL"),
        parse=text,
    )
    skills_style: str = setting(
        "PIPELINE_SKILLS_STYLE",
        "how skills are found: `tagger` (the CRF on a CPU), `tagger+llm` (a model verifies its unsure "
        "mentions and adds missed ones), `llm` (the earlier prompt alone)",
        _llm_style(SKILLS_STYLES, "skills_verify_model"),
        parse=one_of(*SKILLS_STYLES),
    )
    link_referee_model: str = setting(
        "PIPELINE_LINK_REFEREE_MODEL",
        "the model that referees the linker's unsure answers (`linker+llm`)",
        Derived(lambda values: values.get("model") or "", "PIPELINE_MODEL"),
        parse=text,
    )
    link_style: str = setting(
        "PIPELINE_LINK_STYLE",
        "how skills are resolved: `linker` (the learned linker on a CPU) or `linker+llm` (a model chooses "
        "among its three best concepts for its unsure answers, one call per posting)",
        _llm_style(LINK_STYLES, "link_referee_model"),
        parse=one_of(*LINK_STYLES),
    )
    extra_use_cases: tuple[str, ...] = setting(
        "PIPELINE_EXTRA_USE_CASES",
        "opt-in use cases, comma-separated: `posting_assessment` (three expert assessments and their "
        "synthesizer)",
        (),
        parse=name_list,
    )
    outputs_refresh_seconds: int = setting(
        "PIPELINE_OUTPUTS_REFRESH_SECONDS",
        "while runs are making outputs, the enriched postings tables (`enriched_postings` and the two after "
        "it) are remade at most this often; they are remade as soon as those runs end. 0: whenever an "
        "output changes (each remake reads every posting)",
        900,
        parse=whole_number,
    )
    gold_skillspan_path: str = setting(
        "PIPELINE_GOLD_SKILLSPAN",
        "SkillSpan `dev.json`: public gold for postings keyed `skillspan-<source>-<idx>` (the gym)",
        "",
        parse=text,
    )
