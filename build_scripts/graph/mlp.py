"""Feed-forward blocks."""

from __future__ import annotations

from build_scripts.graph.builder import GraphBuilder
from build_scripts.graph.linear import linear, linears
from build_scripts.weights.loaders import Weights


def gated_silu_mlp(b: GraphBuilder, x: str, w: Weights, prefix: str) -> str:
    """down( silu(gate(x)) · up(x) ), SiLU written as x·Sigmoid(x) (an op pair HTP fuses)."""
    gate, up = linears(b, x, w, [f"{prefix}.gate", f"{prefix}.up"])
    act = b.node("Mul", [gate, b.node("Sigmoid", [gate])], name="silu")
    return linear(b, b.node("Mul", [act, up]), w, f"{prefix}.down")


def gelu_mlp(b: GraphBuilder, x: str, w: Weights, prefix: str) -> str:
    """down( gelu(up(x)) ) with biases, exact (erf) GELU as BERT uses."""
    up = linear(b, x, w, f"{prefix}.up", bias=True)
    return linear(b, b.node("Gelu", [up]), w, f"{prefix}.down", bias=True)
