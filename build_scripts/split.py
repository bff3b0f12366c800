"""Split a decoder's NPU graphs into parts by layers, so that no part's weights exceed a budget.

A 1-3B model's weights do not fit one HTP context (on devices a context is loaded whole into
the NPU's address space; ~1.5 GB per part is what loads reliably). Every graph of a model is
cut at the same layer boundaries, so part k of prefill, decode and start holds the same weights
and compiles into one shared context binary per part:

    part 0:  input_ids ─embed─ layers [0, a) ─────────► hidden_a     + new_key/new_value of its layers
    part 1:  hidden_a ──────── layers [a, b) ─────────► hidden_b     + ...
    part 2:  hidden_b ──────── layers [b, L) ─norm─head─► logits     + ...

The boundary ("hidden_<layer>") is the residual stream after a layer: float where the recipe
keeps the residual float, else the uint16 tensor its QuantizeLinear makes, so a split graph
computes exactly what the whole graph does. Each part is the part of the graph its outputs
depend on, traced back to the graph inputs, the weights and the previous boundary; the few
nodes every layer reads (mask and rotary quantization) are repeated in every part. A tied
embedding/LM head table lands in the first and the last part: stored twice once split.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from build_scripts.errors import BuildError

DEFAULT_PART_BUDGET = 1_500_000_000  # bytes of weights per part
_LAYER = re.compile(r"^/?layers\.(\d+)[./]")


def _layer(name: str) -> int | None:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def tensor_bytes(t: TensorProto, fp16: bool = False) -> int:
    """Bytes an initializer takes (external or inline), without loading it; `fp16`: float32
    tensors counted at 2 bytes per element, as HTP holds them in an fp16 build."""
    if fp16 and t.data_type == TensorProto.FLOAT:
        return 2 * (int(np.prod(t.dims)) if t.dims else 1)
    ext = {e.key: e.value for e in t.external_data}
    if "length" in ext:
        return int(ext["length"])
    if t.raw_data:
        return len(t.raw_data)
    count = int(np.prod(t.dims)) if t.dims else 1
    bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4}.get(t.data_type)
    if bits:
        return (count * bits + 7) // 8
    return count * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


class _Graph:
    """Producer/consumer indexes of one graph."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        g = model.graph
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.inits = {t.name: t for t in g.initializer}
        self.inputs = {v.name: v for v in g.input}
        self.outputs = {v.name: v for v in g.output}
        self.n_layers = 1 + max((_layer(n.name) for n in g.node if _layer(n.name) is not None), default=-1)

    def boundary(self, layer: int) -> str:
        """The residual stream after `layer`: the quantized tensor if a QuantizeLinear reads it."""
        name = f"/layers.{layer}/mlp/residual"
        node = next((n for n in self.model.graph.node if n.name == name), None)
        if node is None:
            raise BuildError(f"graph {self.model.graph.name} has no node {name}: it cannot be split into parts")
        out = node.output[0]
        readers = self.consumers.get(out, [])
        if len(readers) == 1 and readers[0].op_type == "QuantizeLinear":
            return readers[0].output[0]
        return out

    def boundary_type(self, tensor: str) -> int:
        node = self.producer[tensor]
        if node.op_type == "QuantizeLinear" and len(node.input) > 2:
            return self.inits[node.input[2]].data_type
        return TensorProto.FLOAT

    def trace(self, outputs: list[str], stop: set[str]) -> list[onnx.NodeProto]:
        """The nodes `outputs` depend on, back to graph inputs, initializers and `stop`, in graph order."""
        seen: set[int] = set()
        todo = list(outputs)
        while todo:
            t = todo.pop()
            if t in stop or t in self.inits or t in self.inputs or t == "":
                continue
            node = self.producer.get(t)
            if node is None:
                raise BuildError(f"graph {self.model.graph.name}: tensor {t!r} has no producer")
            if id(node) in seen:
                continue
            seen.add(id(node))
            todo.extend(node.input)
        return [n for n in self.model.graph.node if id(n) in seen]


def _part_outputs(g: _Graph, start: int, end: int) -> list[str]:
    """Graph outputs part [start, end) makes (its layers' KV, logits if it is the last), in graph order."""
    keep = []
    for name in g.outputs:
        layer = re.search(r"_(\d+)$", name)
        if layer is None:
            if end == g.n_layers:
                keep.append(name)
        elif start <= int(layer.group(1)) < end:
            keep.append(name)
    return keep


def part_weight_bytes(model: onnx.ModelProto, ranges: list[tuple[int, int]], fp16: bool = False) -> list[int]:
    """Bytes of the initializers each part reads (each counted once per part)."""
    g = _Graph(model)
    return [sum(tensor_bytes(g.inits[i], fp16) for i in {i for n in _trace_part(g, a, b) for i in n.input} if i in g.inits)
            for a, b in ranges]


def _trace_part(g: _Graph, start: int, end: int) -> list[onnx.NodeProto]:
    outputs = _part_outputs(g, start, end) + ([g.boundary(end - 1)] if end < g.n_layers else [])
    stop = {g.boundary(start - 1)} if start > 0 else set()
    nodes = g.trace(outputs, stop)
    stray = sorted({_layer(n.name) for n in nodes} - {None, *range(start, end)})
    if stray:
        raise BuildError(f"graph {g.model.graph.name}: part of layers [{start}, {end}) also depends on layer(s) "
                         f"{stray} other than through the residual stream; it cannot be split there")
    return nodes


def plan_parts(model: onnx.ModelProto, budget: int, fp16: bool = False) -> list[tuple[int, int]]:
    """Contiguous layer ranges: as few parts as fit `budget` bytes of weights each, balanced."""
    g = _Graph(model)
    n = g.n_layers
    if n == 0:
        raise BuildError(f"graph {model.graph.name} has no layers to split")
    # weights per layer; what the embedding reads goes with layer 0, the final norm and LM head with
    # the last layer. A tensor read in two places (a tied embedding/head table) counts in both: a
    # part holds its own copy of everything it reads
    cost = np.zeros(n, np.int64)
    tail = set(id(x) for x in g.trace(_part_outputs(g, n, n), {g.boundary(n - 1)}))
    counted: set[tuple[str, int]] = set()
    for node in model.graph.node:
        layer = _layer(node.name)
        if layer is None:
            layer = n - 1 if id(node) in tail else 0
        for i in node.input:
            if i in g.inits and (i, layer) not in counted:
                counted.add((i, layer))
                cost[layer] += tensor_bytes(g.inits[i], fp16)
    if cost.max() > budget:
        raise BuildError(f"one layer of {model.graph.name} needs {cost.max() / 1e6:.3g} MB of weights, more than the "
                         f"part budget of {budget / 1e6:.3g} MB: raise the budget")

    def pack(limit: int) -> list[tuple[int, int]]:
        ranges, start, total = [], 0, 0
        for i in range(n):
            if total + cost[i] > limit:
                ranges.append((start, i))
                start, total = i, 0
            total += cost[i]
        return ranges + [(start, n)]

    parts = len(pack(budget))
    if parts == 1:
        return [(0, n)]
    lo, hi = int(cost.max()), budget  # the smallest limit that still packs into `parts`: balanced
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(pack(mid)) <= parts else (mid + 1, hi)
    return pack(lo)


def split_graph(model: onnx.ModelProto, ranges: list[tuple[int, int]], hidden: int) -> list[onnx.ModelProto]:
    """The parts of one graph for the layer ranges of `plan_parts` (external data references kept:
    write the parts next to the graph they came from)."""
    g = _Graph(model)
    seq = next(d.dim_value for v in model.graph.input if v.name == "input_ids" for d in v.type.tensor_type.shape.dim[1:2])
    parts = []
    for k, (start, end) in enumerate(ranges):
        nodes = _trace_part(g, start, end)
        used = {i for n in nodes for i in n.input}
        inputs = [g.inputs[name] for name in g.inputs if name in used]
        outputs = [g.outputs[name] for name in _part_outputs(g, start, end)]
        if start > 0:
            t = g.boundary(start - 1)
            inputs.insert(0, helper.make_tensor_value_info(t, g.boundary_type(t), [1, seq, hidden]))
        if end < g.n_layers:
            t = g.boundary(end - 1)
            outputs.append(helper.make_tensor_value_info(t, g.boundary_type(t), [1, seq, hidden]))
        graph = helper.make_graph(nodes, f"{model.graph.name}.part{k}", inputs, outputs,
                                  initializer=[g.inits[i] for i in g.inits if i in used])
        part = helper.make_model(graph, opset_imports=model.opset_import, producer_name=model.producer_name,
                                 ir_version=model.ir_version)
        part.doc_string = f"{model.doc_string} (part {k + 1} of {len(ranges)}: layers {start}-{end - 1})"
        parts.append(part)
    return parts


def write_parts(model_dir: Path, graph_file: str, ranges: list[tuple[int, int]], hidden: int) -> list[Path]:
    """Split `model_dir/graph_file` and save `<stem>.part<k>.onnx` beside it (same weights file)."""
    src = model_dir / graph_file
    model = onnx.load(str(src), load_external_data=False)
    paths = []
    for k, part in enumerate(split_graph(model, ranges, hidden)):
        path = src.with_name(f"{src.stem}.part{k}.onnx")
        onnx.save(part, str(path))
        paths.append(path)
    return paths
