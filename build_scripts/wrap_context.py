"""`hexrag build wrap-context`: QNN context binaries made with the QAIRT SDK -> a model directory.

The bring-your-own-SDK path. Convert hexrag's float graphs (`prefill_N.onnx`, `decode.onnx` or
`embed.onnx` of a model directory) with the QAIRT converter and your own quantization (AIMET
encodings, say), make a context binary with `qnn-context-binary-generator`, dump its description
with `qnn-context-binary-utility --json_file`, then:

    hexrag build wrap-context --model models/NAME --binary ctx.bin --json ctx.json \\
        --target sm8750 --out models/NAME-qairt

Every graph of the model must be in the binaries (an embedder's query bucket, `embed_1x32`, may be
left out: the runtime then embeds queries on the main graph), under its own name (or mapped with
`--graph decode=<qnn graph name>`), with the contract's tensor names and shapes. The KV cache
crosses the graph boundary as raw uint16 with one encoding per layer shared by every graph (the
runtime stores rows as they are); every other tensor keeps the contract's float/int type
(`--preserve_io datatype` in the converter), since the runtime feeds and reads those directly.

Each graph becomes an EPContext model referencing the binary (the layout of onnxruntime's
`tools/qnn/gen_qnn_ctx_onnx_model.py`), and the manifest records the binaries, their QNN build
and the KV encodings read from the JSON, so the runtime loads the result like its own builds
(HTP only: the directory holds no ONNX graphs for the CPU).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from build_scripts.errors import BuildError
from build_scripts.quantize.qdq import KV_INPUT, KV_OUTPUT
from build_scripts.staging import staged_directory
from models.manifest import GraphSpec, Manifest, QuantizationSpec, TargetBuild, TargetSpec, TensorSpec, hash_directory, load_manifest
from runtime.qnn_targets import resolve_target

# QNN data types (context-binary-utility names) -> the contract's dtypes; fixed point = quantized
_QNN_TYPES = {
    "QNN_DATATYPE_FLOAT_32": ("float32", False), "QNN_DATATYPE_INT_32": ("int32", False),
    "QNN_DATATYPE_INT_64": ("int64", False), "QNN_DATATYPE_UFIXED_POINT_16": ("uint16", True),
    "QNN_DATATYPE_UINT_16": ("uint16", False), "QNN_DATATYPE_UFIXED_POINT_8": ("uint8", True),
    "QNN_DATATYPE_UINT_8": ("uint8", False),
}
_ONNX_TYPES = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
               "uint16": TensorProto.UINT16, "uint8": TensorProto.UINT8}


@dataclass(frozen=True)
class QnnTensor:
    name: str
    dtype: str
    quantized: bool
    shape: list[int]
    scale: float | None = None
    zero_point: int | None = None  # QNN's offset is the negated zero point


@dataclass(frozen=True)
class QnnGraph:
    name: str
    binary: Path
    sdk: str
    inputs: dict[str, QnnTensor]
    outputs: dict[str, QnnTensor]


def read_binary_json(binary: Path, description: Path) -> list[QnnGraph]:
    """The graphs a context binary holds, from its `qnn-context-binary-utility` JSON."""
    try:
        info = json.loads(description.read_text())["info"]
        sdk = str(info.get("buildId", "unknown"))
        graphs = []
        for g in info["graphs"]:
            gi = g["info"]
            graphs.append(QnnGraph(gi["graphName"], binary, sdk,
                                   {t.name: t for t in map(_tensor, gi["graphInputs"])},
                                   {t.name: t for t in map(_tensor, gi["graphOutputs"])}))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise BuildError(f"{description} is not a qnn-context-binary-utility JSON ({type(e).__name__}: {e})") from None
    if not graphs:
        raise BuildError(f"{description} describes no graphs")
    return graphs


def _tensor(raw: dict) -> QnnTensor:
    t = raw["info"]
    if t["dataType"] not in _QNN_TYPES:
        raise BuildError(f"tensor {t['name']}: QNN type {t['dataType']} has no place in the graph contract")
    dtype, quantized = _QNN_TYPES[t["dataType"]]
    q = t.get("quantizeParams") or {}
    scale = zero_point = None
    if q.get("definition") == "QNN_DEFINITION_DEFINED":
        if q.get("quantizationEncoding") != "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET":
            raise BuildError(f"tensor {t['name']}: {q.get('quantizationEncoding')} I/O encodings are not supported "
                             f"(per-tensor scale/offset only)")
        scale, zero_point = float(q["scaleOffset"]["scale"]), -int(q["scaleOffset"]["offset"])
    return QnnTensor(t["name"], dtype, quantized, [int(d) for d in t["dimensions"]], scale, zero_point)


def _is_kv(name: str) -> bool:
    return bool(KV_INPUT.match(name) or KV_OUTPUT.match(name))


def _check_graph(spec: GraphSpec, g: QnnGraph) -> None:
    """The binary's graph must have the contract's I/O: names, shapes, types (KV as uint16)."""
    for kind, want, have in (("input", spec.inputs, g.inputs), ("output", spec.outputs, g.outputs)):
        missing = [t.name for t in want if t.name not in have]
        extra = sorted(set(have) - {t.name for t in want})
        if missing or extra:
            raise BuildError(f"graph {spec.name} (QNN graph {g.name}): {kind}s differ from the contract: "
                             f"missing {missing or 'none'}, unexpected {extra or 'none'}")
        for t in want:
            q = have[t.name]
            if q.shape != t.shape:
                raise BuildError(f"graph {spec.name}: {t.name} has shape {q.shape} in the binary, the contract "
                                 f"says {t.shape}")
            if _is_kv(t.name):
                if not (q.quantized and q.dtype == "uint16" and q.scale):
                    raise BuildError(f"graph {spec.name}: KV tensor {t.name} must be 16-bit fixed point with a "
                                     f"scale/offset encoding (the runtime stores raw rows); it is {q.dtype}")
            elif q.quantized or q.dtype != t.dtype:
                raise BuildError(f"graph {spec.name}: {t.name} is {'quantized ' if q.quantized else ''}{q.dtype} in "
                                 f"the binary; the runtime exchanges it as {t.dtype}: keep its type when converting "
                                 f"(--preserve_io datatype {t.name})")


def _kv_encodings(specs: list[GraphSpec], graphs: dict[str, QnnGraph], n_layers: int) -> dict[str, dict]:
    """key_i/value_i -> the one encoding every graph uses for that layer's cache rows."""
    tensors: dict[str, dict] = {}
    for spec in specs:
        g = graphs[spec.name]
        for q in (*g.inputs.values(), *g.outputs.values()):
            if not _is_kv(q.name):
                continue
            key = q.name.split("_", 1)[1]  # key_3 / value_3
            enc = {"scale": q.scale, "zero_point": q.zero_point}
            if tensors.setdefault(key, enc) != enc:
                raise BuildError(f"graph {spec.name}: {q.name} is encoded {enc}, another graph uses {tensors[key]}: "
                                 f"every graph must share each layer's KV encoding (quantize them with one "
                                 f"encodings file)")
    if n_layers and len(tensors) != 2 * n_layers:
        raise BuildError(f"the binaries carry KV encodings for {len(tensors)} tensors, the model has {2 * n_layers}")
    return tensors


def _ctx_model(spec: GraphSpec, g: QnnGraph, binary_name: str) -> onnx.ModelProto:
    """An EPContext model standing for graph `g` of the binary next to it."""
    def info(t: TensorSpec):
        return helper.make_tensor_value_info(t.name, _ONNX_TYPES[t.dtype], t.shape)

    node = helper.make_node("EPContext", [t.name for t in spec.inputs], [t.name for t in spec.outputs], name=g.name,
                            domain="com.microsoft", ep_cache_context=binary_name, embed_mode=0,
                            ep_sdk_version=g.sdk, source="Qnn", main_context=1)
    graph = helper.make_graph([node], spec.name, [info(t) for t in spec.inputs], [info(t) for t in spec.outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              producer_name="hexrag wrap-context")
    model.ir_version = 10
    return model


def wrap_context(model_dir: str | Path, binaries: list[tuple[Path, Path]], target: str, out: str | Path,
                 graph_names: dict[str, str] | None = None) -> Manifest:
    """Wrap QAIRT context binaries ((binary, its utility JSON) pairs) for the graphs of `model_dir`
    into a new model directory `out` (see the module docstring). Returns its manifest."""
    src, out = Path(model_dir), Path(out)
    m = load_manifest(src)
    t = resolve_target(target)
    names = graph_names or {}
    unknown = sorted(set(names) - {g.name for g in m.graphs})
    if unknown:
        raise BuildError(f"--graph names {', '.join(unknown)} are not graphs of {m.name} ({', '.join(g.name for g in m.graphs)})")
    available: dict[str, QnnGraph] = {}
    for binary, description in binaries:
        if not Path(binary).is_file():
            raise BuildError(f"context binary {binary} not found")
        for g in read_binary_json(Path(binary), Path(description)):
            available[g.name] = g
    graphs: dict[str, QnnGraph] = {}
    wrapped = [g for g in m.graphs if not _optional(m, g) or names.get(g.name, g.name) in available]
    for spec in wrapped:
        qnn_name = names.get(spec.name, spec.name)
        if qnn_name not in available:
            raise BuildError(f"graph {spec.name} is not in the binaries (QNN graphs: {', '.join(sorted(available))}); "
                             f"map it with --graph {spec.name}=<QNN graph name>")
        graphs[spec.name] = available[qnn_name]
    specs = [_contract_io(s) for s in wrapped]
    for spec in specs:
        _check_graph(spec, graphs[spec.name])
    kv = _kv_encodings(specs, graphs, m.architecture.n_layers if m.kind == "llm" else 0)
    sdks = {g.sdk for g in graphs.values()}
    if len(sdks) > 1:
        raise BuildError(f"the binaries come from different QNN builds ({', '.join(sorted(sdks))}); generate them with one SDK")
    used = sorted({g.binary for g in graphs.values()})
    shared = any(sum(g.binary == b for g in graphs.values()) > 1 for b in used)
    variant = "shared" if shared else "sim"
    with staged_directory(out) as tmp:
        rel = Path("htp") / t.name / variant
        (tmp / rel).mkdir(parents=True)
        for b in used:
            shutil.copy2(b, tmp / rel / b.name)
        for spec in specs:
            onnx.save(_ctx_model(spec, graphs[spec.name], graphs[spec.name].binary.name), str(tmp / rel / f"{spec.name}_ctx.onnx"))
        for f in (m.tokenizer.file, m.tokenizer.chat_template):
            if f:
                shutil.copy2(src / f, tmp / f)
        new = m.model_copy(deep=True)
        new.name = out.name
        new.created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        new.graphs = [s.model_copy(update={"file": (rel / f"{s.name}_ctx.onnx").as_posix()}) for s in specs]
        new.weights_file = (rel / used[0].name).as_posix()
        new.quantization = QuantizationSpec.model_validate({
            "recipe": "external", "format": "QNN context binary (QAIRT)",
            "kv_cache": {"dtype": "uint16", "tensors": kv} if kv else None,
            "io": {s.name: {q.name: {"scale": q.scale, "zero_point": q.zero_point}
                            for q in (*graphs[s.name].inputs.values(), *graphs[s.name].outputs.values()) if q.quantized}
                   for s in specs},
        })
        new.target = TargetSpec(
            backend="htp", precision="external", weights_bytes=sum(b.stat().st_size for b in used),
            versions={"qnn_build": sdks.pop()},
            builds=[TargetBuild(target=t.name, chip=t.chip, soc_model=t.soc_model, htp_arch=t.htp_arch, variant=variant,
                                shared_weights=shared,
                                graphs={s.name: (rel / f"{s.name}_ctx.onnx").as_posix() for s in specs},
                                binaries={(rel / b.name).as_posix(): b.stat().st_size for b in used},
                                wrapped={s.name: graphs[s.name].name for s in specs})])
        new.files = hash_directory(tmp)
        new.save(tmp)
    return new


def _optional(m: Manifest, spec: GraphSpec) -> bool:
    """An embedder's query bucket: the runtime embeds on the main graph when it is not wrapped."""
    return m.kind == "embedder" and spec.name != m.graph("embed").name


def _contract_io(spec: GraphSpec) -> GraphSpec:
    """The graph's I/O as a wrapped binary exchanges it: KV tensors as raw uint16."""
    def kv16(ts):
        return [t.model_copy(update={"dtype": "uint16"}) if _is_kv(t.name) else t for t in ts]

    return spec.model_copy(update={"inputs": kv16(spec.inputs), "outputs": kv16(spec.outputs)})
