"""QDQ quantization of one graph for QNN HTP, and the graph surgery around it.

    float graph ─prepare─► (output Identities dropped, tied embedding untied, shapes inferred)
                ─quantize─► onnxruntime.quantization with QNN's config: MinMax ranges from the
                            captured feeds, init_overrides for per-channel weights, pinned KV ranges
                ─blocks───► (w4a16) linear weights re-encoded as block-wise int4 DQ (LPBQ on HTP)
                ─kv_io────► boundary Q of past_* and DQ of new_* removed: KV I/O is raw uint16

Why each step:
- The builder names graph outputs through Identity nodes; the quantizer leaves Identity float,
  so a `new_*` output would come out of a DQ→Identity pair instead of a Q node we can expose.
- A tied embedding table feeds both Gather (tokens) and the LM head Gemm. Per-channel int8 is
  right for the Gemm, but the quantizer then gives the Gather output the table's per-channel
  scale vector as a per-tensor scale (invalid). The Gather gets its own per-tensor table.
- ONNX shape inference does not know SimplifiedLayerNormalization (a contrib op), so every
  tensor after the first norm would have no type and go uncalibrated; ORT's symbolic shape
  inference knows it.
- KV ranges are pinned (rmin/rmax) on past_*, new_* and every data-movement op between the
  producer of new_* and the output, so every graph (prefill buckets and decode) quantizes the
  cache with the SAME scale/zero point: the host copies new rows into the cache as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from build_scripts.errors import BuildError
from build_scripts.quantize.gptq import block_scales, code_range
from build_scripts.quantize.recipes import BLOCK_TYPES, Recipe
from build_scripts.quantize.source_grid import FLOAT_NODES as MIN_TERM_NODES, MINS_SUFFIX, WEIGHT_SUFFIX

log = logging.getLogger(__name__)

KV_INPUT = re.compile(r"^past_(key|value)_(\d+)$")
KV_OUTPUT = re.compile(r"^new_(key|value)_(\d+)$")
_MOVEMENT = ("Transpose", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten")
_ALIGN = 4096
INLINE_BYTES = 1024  # initializers smaller than this stay inside each graph file


def quant_type(name: str):
    from onnxruntime.quantization import QuantType

    return {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "uint16": QuantType.QUInt16,
            "int16": QuantType.QInt16, "int4": QuantType.QInt4, "uint4": QuantType.QUInt4}[name]


_ONNX_NAMES = {TensorProto.UINT8: "uint8", TensorProto.INT8: "int8", TensorProto.UINT16: "uint16",
               TensorProto.INT16: "int16", TensorProto.INT4: "int4", TensorProto.UINT4: "uint4",
               TensorProto.FLOAT: "float32", TensorProto.INT32: "int32", TensorProto.INT64: "int64"}


# ------------------------------------------------------------------------------------------------
# Graph helpers
# ------------------------------------------------------------------------------------------------

def _producers(graph) -> dict[str, onnx.NodeProto]:
    return {o: n for n in graph.node for o in n.output}


def _consumers(graph) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list] = {}
    for n in graph.node:
        for x in n.input:
            out.setdefault(x, []).append(n)
    return out


def _rename_input(graph, old: str, new: str) -> None:
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new


def _initializers(graph) -> dict[str, TensorProto]:
    return {t.name: t for t in graph.initializer}


# ------------------------------------------------------------------------------------------------
# 1. Prepare the float graph
# ------------------------------------------------------------------------------------------------

def point_external_data(model: onnx.ModelProto, location: str) -> set[str]:
    """Point every external initializer at `location` (same offsets); returns the locations they had."""
    before = set()
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    before.add(e.value)
                    e.value = location
    return before


def prepare(model: onnx.ModelProto, base_dir: Path) -> onnx.ModelProto:
    """Drop output Identities, untie a table shared by Gather and Gemm/MatMul, infer shapes.
    `model` is modified and returned; its weights may stay external in `base_dir` (shape inference
    reads the few small constants it computes with from there)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    renames, keep = {}, []
    for n in g.node:
        if n.op_type == "Identity" and n.output[0] in outputs and n.input[0] not in outputs \
                and n.input[0] not in {i.name for i in g.input}:
            renames[n.input[0]] = n.output[0]
        else:
            keep.append(n)
    for n in keep:
        for i, x in enumerate(n.input):
            n.input[i] = renames.get(x, x)
        for i, x in enumerate(n.output):
            n.output[i] = renames.get(x, x)
    del g.node[:]
    g.node.extend(keep)

    inits = _initializers(g)
    uses = _consumers(g)
    for name, init in list(inits.items()):
        users = uses.get(name, [])
        gathers = [n for n in users if n.op_type == "Gather" and n.input[0] == name]
        others = [n for n in users if n not in gathers]
        if gathers and others:
            # a second name for the same bytes: the quantizer gives each its own encoding
            head = "lm_head" if "lm_head" not in inits else f"{name}.head"
            twin = TensorProto()
            twin.CopyFrom(init)
            twin.name = head
            g.initializer.append(twin)
            for n in others:
                for i, x in enumerate(n.input):
                    if x == name:
                        n.input[i] = head

    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    with contextlib.chdir(base_dir):  # it resolves external data against the working directory
        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=False)
    if inferred is None:
        raise BuildError(f"shape inference failed on graph {g.name}")
    return inferred


def weight_roles(model: onnx.ModelProto) -> dict[str, tuple[str, int | None]]:
    """Initializer -> (role, per-channel axis): linear (MatMul weight [in,out], axis 1), lm_head
    (Gemm weight; axis 0 with transB), embedding (Gather table, per-tensor)."""
    inits = _initializers(model.graph)
    roles: dict[str, tuple[str, int | None]] = {}
    for n in model.graph.node:
        if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
            roles[n.input[1]] = ("linear", 1)
        elif n.op_type == "Gemm" and n.input[1] in inits:
            trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
            roles[n.input[1]] = ("lm_head", 0 if trans_b else 1)
        elif n.op_type == "Gather" and n.input[0] in inits:
            roles[n.input[0]] = ("embedding", None)
        elif n.op_type in ("LayerNormalization", "SimplifiedLayerNormalization"):
            for x in n.input[1:3]:
                if x in inits and inits[x].data_type == TensorProto.FLOAT:
                    roles[x] = ("norm", None)
    return roles


# ------------------------------------------------------------------------------------------------
# 2. Overrides
# ------------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """What the quantizer is told, kept for the manifest."""

    overrides: dict[str, list[dict[str, Any]]]  # for get_qnn_qdq_config(init_overrides=...)
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)  # weight -> human-readable spec
    blocked: dict[str, int] = field(default_factory=dict)  # weight -> block size (int4/int8 blocks)
    kv_pinned: dict[str, list[str]] = field(default_factory=dict)  # KV tensor -> tensors pinned with it
    user: dict[str, dict[str, Any]] = field(default_factory=dict)  # tensor -> user override applied
    float_nodes: list[str] = field(default_factory=list)  # nodes the recipe keeps unquantized (keep_float)


def kv_pin_chain(model: onnx.ModelProto, output: str) -> list[str]:
    """`output` and every tensor above it through data-movement ops, plus the first computing
    op's output: all of them must carry the KV encoding, or a movement op requantizes."""
    prod = _producers(model.graph)
    chain, t = [output], output
    while t in prod:
        node = prod[t]
        if node.op_type not in _MOVEMENT or not node.input:
            break
        t = node.input[0]
        chain.append(t)
    return chain


def build_plan(model: onnx.ModelProto, recipe: Recipe, kv_ranges: dict[str, tuple[float, float]],
               grids: dict | None = None) -> Plan:
    """Overrides for one prepared graph. `kv_ranges`: "key_3"/"value_3" -> pinned (rmin, rmax);
    `grids`: linear weights on their source's int8 blocks (source_grid.py). Weights that only
    float nodes read (keep_float; the min terms) stay float."""
    g = model.graph
    roles = weight_roles(model)
    inits = _initializers(g)
    grids = grids or {}
    mins = {w[: -len(WEIGHT_SUFFIX)] + MINS_SUFFIX for w in grids}
    float_nodes = recipe.float_nodes(n.name for n in g.node)
    if grids:  # the min terms' nodes (source_grid.split_mins) are float whatever the recipe says
        float_nodes += [n.name for n in g.node if n.name.endswith(MIN_TERM_NODES) and n.name not in float_nodes]
    plan = Plan({}, float_nodes=float_nodes)
    readers, floats = _consumers(g), set(float_nodes)
    float_only = {w for w in roles if all(n.name in floats for n in readers[w])}

    for name, (role, axis) in roles.items():
        if name in float_only:  # read by float nodes only: stays float (fp16 on HTP)
            plan.weights[name] = {"role": "min term" if name in mins else role, "type": "float"}
            continue
        if name in grids:
            qtype = recipe.linear_weights  # int8, or int4 for grids whose codes fit (pipeline._source_grids)
            plan.overrides[name] = [{"quant_type": quant_type(qtype), "symmetric": True, "axis": axis}]
            plan.weights[name] = {"role": role, "type": qtype, "symmetric": True, "rounding": "source",
                                  "granularity": f"{grids[name].origin} block{grids[name].block}"}
            plan.blocked[name] = grids[name].block
            continue
        default = {"linear": recipe.linear_weights, "lm_head": recipe.lm_head, "embedding": recipe.embedding,
                   "norm": recipe.norm_weights}[role]
        user = recipe.matching(name)
        qtype = (user or {}).get("quant_type", default)
        per_channel = (user or {}).get("per_channel", role == "linear" or (role == "lm_head" and recipe.lm_head_per_channel))
        per_channel = per_channel and axis is not None
        symmetric = (user or {}).get("symmetric", per_channel or qtype.startswith("int"))
        spec: dict[str, Any] = {"quant_type": quant_type(qtype), "symmetric": bool(symmetric)}
        if per_channel:
            spec["axis"] = axis
        plan.overrides[name] = [spec]
        k = inits[name].dims[0]
        blocked = (role == "linear" and user is None and recipe.block_size and qtype in BLOCK_TYPES
                   and k % recipe.block_size == 0)
        plan.weights[name] = {"role": role, "type": qtype, "symmetric": bool(symmetric),
                              "granularity": (f"block{recipe.block_size}" if blocked else
                                              "per-channel" if per_channel else "per-tensor")}
        if blocked:
            plan.blocked[name] = recipe.block_size
        if user is not None:
            plan.user[name] = user

    # activations named by the user (not weights, not KV)
    tensors = {o for n in g.node for o in n.output} | {i.name for i in g.input}
    kv_names = {t for t in tensors if KV_INPUT.match(t) or KV_OUTPUT.match(t)}
    for t in sorted(tensors - set(roles) - kv_names):
        user = recipe.matching(t)
        if user is None:
            continue
        spec = {}
        if "quant_type" in user:
            spec["quant_type"] = quant_type(user["quant_type"])
        if "symmetric" in user:
            spec["symmetric"] = bool(user["symmetric"])
        if "rmin" in user:
            spec["rmin"], spec["rmax"] = np.float32(user["rmin"]), np.float32(user["rmax"])
        if spec:
            plan.overrides[t] = [spec]
            plan.user[t] = user

    # the KV cache: one pinned range per layer and kind, identical in every graph
    kv_type = quant_type(recipe.kv_cache)
    graph_inputs = {i.name for i in g.input}
    for out in (o.name for o in g.output):
        m = KV_OUTPUT.match(out)
        if not m:
            continue
        key = f"{m.group(1)}_{m.group(2)}"
        if key not in kv_ranges:
            raise BuildError(f"no calibrated range for the KV tensor {out}")
        lo, hi = kv_ranges[key]
        spec = {"quant_type": kv_type, "rmin": np.float32(lo), "rmax": np.float32(hi)}
        past = f"past_{m.group(1)}_{m.group(2)}"
        pinned = kv_pin_chain(model, out) + ([past] if past in graph_inputs else [])
        for t in pinned:
            if t in plan.user:
                log.warning("override for %s ignored: it carries the KV cache encoding", t)
                plan.user.pop(t)
            plan.overrides[t] = [dict(spec)]
        plan.kv_pinned[out] = pinned
    return plan


# ------------------------------------------------------------------------------------------------
# 3. Quantize
# ------------------------------------------------------------------------------------------------

def quantize_graph(prepared: Path, out: Path, ranges: dict[str, tuple[float, float]], plan: Plan, recipe: Recipe,
                   work: Path | None = None) -> None:
    """onnxruntime's QDQ quantizer with QNN's compatibility config, on calibrated `ranges`.

    Every range is widened by `recipe.activation_margin` of its span on each side and handed to
    the quantizer as its calibration cache (no data reader: the ranges were collected over the
    whole calibration text already). MinMax still clips whatever the text never reached; 16-bit
    grids have levels to spare for the margin."""
    from onnxruntime.quantization import CalibrationMethod, quantize_static
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    work = work or prepared.parent
    m = recipe.activation_margin
    widened = {name: TensorData(lowest=np.float32(lo - m * (hi - lo)), highest=np.float32(hi + m * (hi - lo)))
               for name, (lo, hi) in ranges.items()}
    cache = work / f"{prepared.stem}.calibration.json"
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, widened), cache)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer warns about "pre-processing" through the root logger
    try:
        config = get_qnn_qdq_config(str(prepared), None, calibrate_method=CalibrationMethod.MinMax,
                                    activation_type=quant_type(recipe.activations),
                                    weight_type=quant_type("int8"), init_overrides=plan.overrides)
        quantize_static(str(prepared), str(out), None, calibrate_method=CalibrationMethod.MinMax,
                        quant_format=config.quant_format, activation_type=config.activation_type,
                        weight_type=config.weight_type, op_types_to_quantize=config.op_types_to_quantize,
                        nodes_to_quantize=config.nodes_to_quantize,
                        nodes_to_exclude=[*(config.nodes_to_exclude or []), *plan.float_nodes],
                        per_channel=config.per_channel, reduce_range=config.reduce_range,
                        use_external_data_format=config.use_external_data_format,
                        extra_options=config.extra_options, calibration_cache_path=str(cache))
    finally:
        root.setLevel(level)


# ------------------------------------------------------------------------------------------------
# 4. Block-wise int4/int8 (LPBQ)
# ------------------------------------------------------------------------------------------------

def pack_int4(q: np.ndarray) -> bytes:
    """Signed 4-bit values, two per byte, first element in the low nibble (ONNX INT4 layout)."""
    flat = (q.astype(np.int8).ravel() & 0x0F).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def unpack_int4(raw: bytes, count: int) -> np.ndarray:
    b = np.frombuffer(raw, np.uint8)
    out = np.empty(b.size * 2, np.int8)
    out[0::2] = (b & 0x0F).astype(np.int8)
    out[1::2] = (b >> 4).astype(np.int8)
    out = np.where(out > 7, out - 16, out).astype(np.int8)
    return out[:count]


def block_quantize(weight: np.ndarray, block: int, bits: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 (or int8) blocks of `block` rows of a [K, N] weight: (q int8 [K,N] in [-8,7]
    (or [-127,127]), scale [K/block, N], see gptq.block_scales)."""
    k, n = weight.shape
    qmin, qmax = code_range(bits)
    w = weight.astype(np.float32).reshape(k // block, block, n)
    scale = block_scales(np.abs(w).max(axis=1), bits, channel_axis=1).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None, :]), qmin, qmax).astype(np.int8).reshape(k, n)
    return q, scale


def initializer_location(path: Path, name: str) -> tuple[Path, int, int] | None:
    """(data file, offset, length) of an external initializer of a graph file."""
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        if t.name == name and t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            return path.parent / info["location"], int(info.get("offset", 0)), int(info["length"])
    return None


def write_initializer(path: Path, name: str, value: np.ndarray) -> None:
    """Overwrite an external float32 initializer of a graph file in place (same size)."""
    where = initializer_location(path, name)
    data = np.ascontiguousarray(value, dtype=np.float32)
    if where is None or where[2] != data.nbytes:
        raise BuildError(f"{path.name}: {name} is not an external initializer of {data.nbytes} bytes")
    with open(where[0], "r+b") as f:
        f.seek(where[1])
        f.write(data.tobytes())


def read_initializers(path: Path, names) -> dict[str, np.ndarray]:
    """Float initializers of a graph file by name, read from its external data without loading the rest."""
    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for t in model.graph.initializer:
        if t.name not in names:
            continue
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            with open(path.parent / info["location"], "rb") as f:
                f.seek(int(info.get("offset", 0)))
                raw = f.read(int(info["length"]))
            out[t.name] = np.frombuffer(raw, np.float32).reshape(tuple(t.dims))
        else:
            out[t.name] = numpy_helper.to_array(t)
    return out


def apply_blocks(model: onnx.ModelProto, float_weights: dict[str, np.ndarray], blocked: dict[str, int],
                 rounded: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> int:
    """Replace the per-channel DQ of each blocked weight with a block-wise DQ of the same type
    (int4 or int8; axis 0 = the input dimension, block_size attribute, scale [K/B, N], no zero point).
    `rounded`: precomputed (q, scale) per weight (GPTQ); others are rounded to nearest here."""
    g = model.graph
    inits = _initializers(g)
    done = 0
    for node in g.node:
        if node.op_type != "DequantizeLinear" or not node.input[0].endswith("_quantized"):
            continue
        name = node.input[0][: -len("_quantized")]
        if name not in blocked:
            continue
        block = blocked[name]
        qt = inits[node.input[0]]
        int4 = qt.data_type in (TensorProto.INT4, TensorProto.UINT4)  # written as symmetric int4 blocks
        if rounded and name in rounded:
            q, scale = rounded[name]
            scale = scale.astype(np.float32)
        else:
            q, scale = block_quantize(float_weights[name], block, bits=4 if int4 else 8)
        for old in node.input[1:]:
            if old in inits:
                g.initializer.remove(inits.pop(old))
        g.initializer.remove(qt)
        qname, sname = f"{name}_blockq", f"{name}_blockscale"
        t = (TensorProto(name=qname, data_type=TensorProto.INT4, dims=list(q.shape), raw_data=pack_int4(q)) if int4
             else numpy_helper.from_array(q.astype(np.int8), qname))
        g.initializer.extend([t, numpy_helper.from_array(scale, sname)])
        del node.input[:]
        node.input.extend([qname, sname])
        del node.attribute[:]
        node.attribute.extend([helper.make_attribute("axis", 0), helper.make_attribute("block_size", block)])
        done += 1
    if done != len(blocked):
        raise BuildError(f"block quantization found {done} of {len(blocked)} weights in graph {g.name}")
    return done


# ------------------------------------------------------------------------------------------------
# 5. KV cache as raw uint16 graph I/O
# ------------------------------------------------------------------------------------------------

def _qparams(inits: dict[str, TensorProto], node: onnx.NodeProto) -> dict[str, Any]:
    scale = numpy_helper.to_array(inits[node.input[1]])
    zp = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    zpa = numpy_helper.to_array(zp) if zp is not None else np.zeros((), np.uint8)
    return {"dtype": _ONNX_NAMES.get(zp.data_type, "uint8") if zp is not None else "uint8",
            "scale": [float(x) for x in scale.ravel()] if scale.size > 1 else float(scale),
            "zero_point": [int(x) for x in zpa.ravel()] if zpa.size > 1 else int(zpa)}


def kv_io_to_uint16(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """Remove the graph-input Q of every past_* and the graph-output DQ of every new_*; those I/O
    become the quantized type. Returns tensor -> {dtype, scale, zero_point}."""
    g = model.graph
    inits = _initializers(g)
    params: dict[str, dict[str, Any]] = {}
    remove = []
    uses = _consumers(g)
    for inp in g.input:
        if not KV_INPUT.match(inp.name):
            continue
        users = uses.get(inp.name, [])
        if len(users) != 1 or users[0].op_type != "QuantizeLinear":
            raise BuildError(f"{g.name}: {inp.name} should feed exactly one QuantizeLinear, feeds "
                             f"{[u.op_type for u in users]}")
        q = users[0]
        params[inp.name] = _qparams(inits, q)
        _rename_input(g, q.output[0], inp.name)
        remove.append(q)
        inp.type.tensor_type.elem_type = inits[q.input[2]].data_type
    prod = _producers(g)
    for out in g.output:
        if not KV_OUTPUT.match(out.name):
            continue
        dq = prod.get(out.name)
        if dq is None or dq.op_type != "DequantizeLinear":
            raise BuildError(f"{g.name}: {out.name} should come from a DequantizeLinear, comes from "
                             f"{dq.op_type if dq else 'nothing'}")
        q = prod.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            raise BuildError(f"{g.name}: {out.name} is not quantized by a QuantizeLinear")
        params[out.name] = _qparams(inits, q)
        inner = f"{out.name}_dequantized"
        dq.output[0] = inner
        _rename_input(g, out.name, inner)  # internal consumers read the DQ as before
        old = q.output[0]
        _rename_input(g, old, out.name)
        q.output[0] = out.name
        if not any(inner in n.input for n in g.node):
            remove.append(dq)
        out.type.tensor_type.elem_type = inits[q.input[2]].data_type
    for n in remove:
        g.node.remove(n)
    # the same layer's past and new tensors must share one encoding
    for name, p in params.items():
        m = KV_OUTPUT.match(name)
        if m:
            past = params.get(f"past_{m.group(1)}_{m.group(2)}")
            if past is not None and (past["scale"], past["zero_point"]) != (p["scale"], p["zero_point"]):
                raise BuildError(f"{g.name}: {name} and its past tensor got different encodings "
                                 f"({p} vs {past}): the KV pinning did not hold")
    return params


def boundary_params(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """Float graph I/O and the encoding the graph applies right inside the boundary."""
    g = model.graph
    inits = _initializers(g)
    uses, prod = _consumers(g), _producers(g)
    out: dict[str, dict[str, Any]] = {}
    for inp in g.input:
        if inp.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        q = next((n for n in uses.get(inp.name, []) if n.op_type == "QuantizeLinear"), None)
        if q is not None:
            out[inp.name] = {"dtype": "float32", "quantized_inside": _qparams(inits, q)}
    for o in g.output:
        dq = prod.get(o.name)
        if o.type.tensor_type.elem_type == TensorProto.FLOAT and dq is not None and dq.op_type == "DequantizeLinear":
            out[o.name] = {"dtype": "float32", "quantized_inside": _qparams(inits, dq)}
    return out


def activation_encodings(model: onnx.ModelProto) -> dict[str, tuple[float, float, str]]:
    """Every quantized activation: tensor -> (represented min, max, type), from its Q node."""
    g = model.graph
    inits = _initializers(g)
    out = {}
    levels = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
              TensorProto.INT16: (-32768, 32767)}
    for n in g.node:
        if n.op_type != "QuantizeLinear" or n.input[0] in inits:
            continue
        scale = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
        zpt = inits.get(n.input[2]) if len(n.input) > 2 else None
        if zpt is None or scale.size != 1:
            continue
        zp = float(numpy_helper.to_array(zpt))
        lo, hi = levels.get(zpt.data_type, (0, 255))
        out[n.input[0]] = (float(scale * (lo - zp)), float(scale * (hi - zp)), _ONNX_NAMES.get(zpt.data_type, "?"))
    return out


# ------------------------------------------------------------------------------------------------
# 6. One shared weights file for all graphs
# ------------------------------------------------------------------------------------------------

def _raw(t: TensorProto) -> bytes:
    if t.HasField("raw_data"):
        return t.raw_data
    return numpy_helper.from_array(numpy_helper.to_array(t)).raw_data


def externalize(models: dict[str, onnx.ModelProto], path: Path) -> dict[str, int]:
    """Move every initializer of at least INLINE_BYTES into one file (page-aligned, each distinct
    content written once, so graphs sharing a quantized weight share its bytes). Returns
    {"bytes": file size, "tensors": distinct tensors written, "references": references}."""
    written: dict[bytes, tuple[int, int]] = {}
    refs = 0
    with open(path, "wb") as f:
        for model in models.values():
            for t in model.graph.initializer:
                raw = _raw(t)
                if len(raw) < INLINE_BYTES:
                    continue
                key = hashlib.sha256(raw).digest() + bytes([t.data_type])
                if key not in written:
                    offset = f.tell()
                    pad = -offset % _ALIGN
                    f.write(b"\0" * pad)
                    written[key] = (offset + pad, len(raw))
                    f.write(raw)
                offset, length = written[key]
                for fld in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    t.ClearField(fld)
                del t.external_data[:]
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", path.name), ("offset", str(offset)), ("length", str(length))):
                    t.external_data.add(key=k, value=v)
                refs += 1
        size = f.tell()
    return {"bytes": size, "tensors": len(written), "references": refs}
