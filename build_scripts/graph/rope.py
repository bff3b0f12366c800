"""Rotary position embedding applied with host-supplied cos/sin (no position math in the graph)."""

from __future__ import annotations

import numpy as np

from build_scripts.graph.builder import MS_DOMAIN, GraphBuilder


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


def rotary_embedding(b: GraphBuilder, x: str, cos: str, sin: str, heads: int, seq: int) -> str:
    """The same rotation as one com.microsoft RotaryEmbedding node (the CPU target), on x
    [1, S, heads·d]: the host's per-step tables [S, d/2] act as the kernel's cos/sin cache and
    the positions are simply 0..S−1 into it."""
    positions = b.const([list(range(seq))], np.int64)
    return b.node("RotaryEmbedding", [x, positions, cos, sin], domain=MS_DOMAIN, interleaved=0, num_heads=heads)
