"""Rotary position embedding applied with host-supplied cos/sin (no position math in the graph)."""

from __future__ import annotations

from build_scripts.graph.builder import GraphBuilder


def apply_rotary(b: GraphBuilder, x: str, cos: str, sin: str, head_dim: int) -> str:
    """
        x[..., :d/2] = x1 ┐          ┌ x1·cos − x2·sin ┐
        x[..., d/2:] = x2 ┘ ──────►  └ x2·cos + x1·sin ┘ ──Concat──►

    x: [1, heads, S, d]; cos/sin: [1, 1, S, d/2] broadcast over heads.
    """
    half = head_dim // 2
    x1, x2 = b.node("Split", [x, b.ints(half, half)], n_out=2, axis=-1)
    lo = b.node("Sub", [b.node("Mul", [x1, cos]), b.node("Mul", [x2, sin])])
    hi = b.node("Add", [b.node("Mul", [x2, cos]), b.node("Mul", [x1, sin])])
    return b.node("Concat", [lo, hi], axis=-1)

