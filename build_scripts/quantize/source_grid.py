"""Int8 (or int4) linear weights on the grid the GGUF file already has (`source_grid`: w8a16,
w4a16-gguf, where Q4_0/Q4_1/Q4_K codes fit int4).

A GGUF block is integer codes times one scale per block, plus, for Q4_1 and Q4_K, one min per
block (graph/blocks.py):

    Q4_0  (q − 8)·d          Q8_0  q·d          Q6_K  (q − 32)·d·sc       block 32 / 32 / 16
    Q4_1  (q − 8)·d + (m + 8d)                  Q4_K  (q − 8)·d·sc + (8·d·sc − dmin·mn)

So int8 blocks with the file's own scales hold the codes bit-exactly, and the mins become a
second, small MatMul over the block sums of x with float weights [K/block, N]:

    x ─MatMul(int8 blocks: codes, d)───────────────────────────┬─Add──►   (the MatMul's output name)
      └─Reshape [.., K/block, block]─ReduceSum─MatMul(mins, float)┘

Rounding a Q4_1 tensor onto any new int8 grid (per channel or blocks of 32, GPTQ or nearest)
costs ~0.5–0.8% relative error per weight, which measured as the gap between SmolLM2's w8a16 and
its float graphs (docs/benchmarks.md). The split is made in the prepared float graph before
calibration. The block sums and the min-term MatMul and Add stay float (fp16 on HTP; the codes
MatMul's output is quantized like any linear output): quantizing them to 16 bits as well cost
SmolLM2 0.3 points of greedy agreement (98.19% -> 97.88%).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from build_scripts.graph.blocks import BlockWeight, from_gguf

log = logging.getLogger(__name__)

FLOAT_NODES = ("/block_sums/reshape", "/block_sums", "/mins", "/add_mins")  # name endings of the min-term nodes
WEIGHT_SUFFIX = ".weight_t"  # the graphs' linear weights: loader name + this, stored [K, N]
MINS_SUFFIX = ".mins_t"  # the min term's weight [K/block, N]
_TOLERANCE = 1e-6  # max |float weight − grid| relative to max |weight|: the same tensor


@dataclass
class SourceGrid:
    codes: np.ndarray  # int8 [K, N]
    scales: np.ndarray  # float32 [K/block, N]
    block: int
    mins: np.ndarray | None  # float32 [K/block, N]: added to every weight of the block
    origin: str  # "gguf Q4_1"

    def fits(self, bits: int) -> bool:
        """Whether the codes are signed `bits`-bit integers (Q4_0/Q4_1/Q4_K codes fit int4)."""
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return bool(self.codes.min() >= lo and self.codes.max() <= hi)

    def dequantize(self, mins: bool = True) -> np.ndarray:
        """float32 [K, N]; `mins=False`: the codes × scales part alone (what the split MatMul holds)."""
        w = self.codes.astype(np.float32) * np.repeat(self.scales, self.block, axis=0)
        return w if self.mins is None or not mins else w + np.repeat(self.mins, self.block, axis=0)


def grid_of(bw: BlockWeight) -> SourceGrid:
    """A MatMulNBits BlockWeight [N, K] as signed int8 codes [K, N]: codes re-centred on 0 (the
    offset moves into the min term, which Q4_0/Q8_0/Q6_K do not need)."""
    codes = bw.unpacked().astype(np.int16)  # [N, K/block, block]
    zero = bw.zero_points[..., None].astype(np.int16) if bw.zero_points is not None else 1 << (bw.bits - 1)
    codes = codes - zero
    mins = bw.mins
    if mins is not None:  # Q4_1/Q4_K codes are 0..15: centre them, the min absorbs the shift
        shift = 1 << (bw.bits - 1)
        codes = codes - shift
        mins = mins + shift * bw.scales
    k = bw.k
    codes = codes.reshape(bw.n, -1)[:, :k].T.astype(np.int8)
    t = lambda a: None if a is None else np.ascontiguousarray(a.T, dtype=np.float32)
    return SourceGrid(np.ascontiguousarray(codes), t(bw.scales), bw.block, t(mins), bw.origin.split(" (")[0])


def source_grids(source: str | Path, names: list[str], read: Callable[[str], np.ndarray]) -> dict[str, SourceGrid]:
    """The grids of the linear weights `names` (graph initializers; `read(name)` -> float [K, N])
    that the GGUF `source` stores in a block type with an exact int8 form, each checked equal to
    the float weight up to the constant the graph folded into it (attention's 1/√d on q).
    Weights the file does not hold exactly are left out (they are quantized per channel)."""
    from build_scripts.weights.loaders import load_weights

    weights = load_weights(source).weights
    out = {}
    for name in names:
        if not name.endswith(WEIGHT_SUFFIX):
            continue
        stored, raw = weights.stored(name[: -len(WEIGHT_SUFFIX)])
        bw = from_gguf(stored, raw) if raw is not None else None
        if bw is None or bw.block % 8 or bw.k % bw.block:  # HTP blocks: multiples of 8, whole rows
            continue
        grid, w = grid_of(bw), read(name)
        exact = grid.dequantize()
        if exact.shape != w.shape:
            continue
        fold = float(np.vdot(w, exact) / max(np.vdot(exact, exact), 1e-30))
        if np.abs(w - fold * exact).max() > _TOLERANCE * max(np.abs(w).max(), 1e-30):
            log.warning("%s: the float weight is not the GGUF's %s blocks; quantized per channel", name, stored)
            continue
        f = np.float32(fold)
        grid.scales = grid.scales * f
        grid.mins = None if grid.mins is None else grid.mins * f
        out[name] = grid
    return out


def split_mins(model: onnx.ModelProto, grids: dict[str, SourceGrid]) -> None:
    """Rewrite every MatMul whose weight has a min term as codes MatMul + min-term MatMul (see the
    module docstring); the mins are added as initializers `<weight>.mins_t` (rather small:
    1/block of the weight)."""
    g = model.graph
    sums: dict[tuple[str, int], str] = {}  # q/k/v (and gate/up) share their input's block sums
    nodes = []
    for n in g.node:
        nodes.append(n)
        grid = grids.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) > 1 else None
        if grid is None or grid.mins is None:
            continue
        x, w, out, k = n.input[0], n.input[1], n.output[0], grid.codes.shape[0]
        if (x, grid.block) not in sums:
            base = f"{n.name}/block_sums"
            shape = numpy_helper.from_array(np.array([0, 0, k // grid.block, grid.block], np.int64), f"{base}/shape")
            g.initializer.append(shape)
            nodes.append(helper.make_node("Reshape", [x, shape.name], [f"{base}/blocks"], name=f"{base}/reshape"))
            axes = numpy_helper.from_array(np.array([-1], np.int64), f"{base}/axes")
            g.initializer.append(axes)
            nodes.append(helper.make_node("ReduceSum", [f"{base}/blocks", axes.name], [f"{base}/output_0"],
                                          name=base, keepdims=0))
            sums[(x, grid.block)] = f"{base}/output_0"
        mins = w[: -len(WEIGHT_SUFFIX)] + MINS_SUFFIX
        g.initializer.append(numpy_helper.from_array(grid.mins, mins))
        codes_out = f"{n.name}/codes/output_0"
        n.output[0] = codes_out
        nodes.append(helper.make_node("MatMul", [sums[(x, grid.block)], mins], [f"{n.name}/mins/output_0"],
                                      name=f"{n.name}/mins"))
        nodes.append(helper.make_node("Add", [codes_out, f"{n.name}/mins/output_0"], [out], name=f"{n.name}/add_mins"))
    del g.node[:]
    g.node.extend(nodes)
