"""A small ONNX graph-building helper.

Nodes get hierarchical names from a scope stack (`/layers.3/attn/MatMul`), helpers return
their output names, small constants are created once and reused, and large weights go
through a `WeightStore` so several graphs of one model reference one external data file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
MS_DOMAIN = "com.microsoft"
KQUANT_DOMAIN = "hexrag"  # hexrag's own ops (runtime/kquant: KQuantMatMul)
_ALIGN = 4096  # page-aligned offsets let ONNX Runtime memory-map the weights


class WeightStore:
    """Appends named float arrays to one external data file, each written exactly once."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "wb")
        self._entries: dict[str, tuple[int, int, tuple[int, ...], int]] = {}

    def tensor(self, name: str, make: Callable[[], np.ndarray]) -> TensorProto:
        if name not in self._entries:
            arr = np.ascontiguousarray(make())
            offset = self._file.tell()
            pad = -offset % _ALIGN
            self._file.write(b"\0" * pad)
            offset += pad
            self._file.write(arr.tobytes())
            dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
            self._entries[name] = (offset, arr.nbytes, arr.shape, dtype)
        offset, length, shape, dtype = self._entries[name]
        t = TensorProto(name=name, data_type=dtype, dims=shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", str(offset)), ("length", str(length))):
            t.external_data.add(key=key, value=value)
        return t

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    @property
    def nbytes(self) -> int:
        return sum(length for _, length, _, _ in self._entries.values())


class GraphBuilder:
    def __init__(self, name: str, store: WeightStore | None = None, blocks=None):
        self.name = name
        self.store = store
        self.blocks = blocks  # a blocks.BlockRecipe: linear layers as MatMulNBits (the CPU target)
        self._block_sums: dict[tuple[str, int], str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[TensorProto] = []
        self._consts: dict[tuple, str] = {}
        self._weights: set[str] = set()
        self._scope: list[str] = []
        self._counts: dict[str, int] = {}

    # ---- naming -------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str):
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, base: str) -> str:
        path = "/" + "/".join([*self._scope, base])
        n = self._counts.get(path, 0)
        self._counts[path] = n + 1
        return path if n == 0 else f"{path}_{n}"

    # ---- graph I/O ----------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape: list[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value: str, name: str, elem_type: int, shape: list[int]) -> str:
        """Expose `value` as graph output `name` (through an Identity when the names differ)."""
        if value != name:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=self._unique(f"output_{name}")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    # ---- nodes and tensors --------------------------------------------------------------
    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", name: str | None = None,
             outputs: list[str | None] | None = None, **attrs) -> str | list[str]:
        """`outputs`: names for some outputs (None: generated), e.g. graph outputs written directly."""
        node_name = self._unique(name or op)
        outs = [f"{node_name}/output_{i}" for i in range(n_out)]
        outs = [given or out for given, out in zip(outputs or [None] * n_out, outs, strict=True)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=node_name, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.float32) -> str:
        """A small constant (shapes, axes, scalars), deduplicated by value."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            name = f"const_{len(self._consts)}"
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return self._consts[key]

    def ints(self, *values: int) -> str:
        return self.const(list(values), np.int64)

    def weight(self, name: str, make: Callable[[], np.ndarray]) -> str:
        """A large tensor kept in the shared external data file."""
        if name not in self._weights:
            self.initializers.append(self.store.tensor(name, make))
            self._weights.add(name)
        return name

    def block_sums(self, x: str, k: int, block: int) -> str:
        """Σ of x [.., K] over each block of `block` inputs, as rows [M, K/block] (M: all leading
        positions), once per tensor: q, k and v share theirs."""
        key = (x, block)
        if key not in self._block_sums:
            with self.scope("block_sums"):
                shaped = self.node("Reshape", [x, self.ints(-1, k // block, block)])
                self._block_sums[key] = self.node("ReduceSum", [shaped, self.ints(-1)], keepdims=0)
        return self._block_sums[key]

    # ---- result -------------------------------------------------------------------------
    def model(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)]
        if any(n.domain == KQUANT_DOMAIN for n in self.nodes):  # only graphs that need the kernel library
            opsets.append(helper.make_opsetid(KQUANT_DOMAIN, 1))
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name="hexrag",
            doc_string=doc,
        )
        model.ir_version = 10
        return model
