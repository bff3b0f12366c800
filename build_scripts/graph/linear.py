"""Linear layers and norms, the building blocks every family shares."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from build_scripts.graph.builder import GraphBuilder
from build_scripts.weights.loaders import Weights


def linear(b: GraphBuilder, x: str, w: Weights, name: str, scale: float = 1.0,
           bias: bool = False) -> str:
    """
        x ──MatMul(Wᵀ·scale)──(+ bias·scale)──►

    Weights are stored transposed ([in, out]) so MatMul needs no Transpose; `scale` folds a
    constant factor (attention's 1/√d) into the weights instead of adding a Mul node.
    """
    wt = b.weight(f"{name}.weight_t", _scaled(lambda: w[name].T, scale))
    y = b.node("MatMul", [x, wt], name=name.rsplit(".", 1)[-1])
    if bias:
        y = b.node("Add", [y, b.weight(f"{name}.bias", _scaled(lambda: w[f"{name}_bias"], scale))])
    return y


def _scaled(make: Callable[[], np.ndarray], scale: float) -> Callable[[], np.ndarray]:
    return lambda: np.ascontiguousarray(make() * np.float32(scale), dtype=np.float32)


def rms_norm(b: GraphBuilder, x: str, w: Weights, name: str, eps: float) -> str:
    # SimplifiedLayerNormalization is what HTP maps to its RMSNorm op
    return b.node("SimplifiedLayerNormalization", [x, b.weight(name, lambda: w[name])],
                  axis=-1, epsilon=float(eps), stash_type=1, name="rms_norm")


def layer_norm(b: GraphBuilder, x: str, w: Weights, name: str, eps: float) -> str:
    scale = b.weight(name, lambda: w[name])
    bias = b.weight(f"{name}_bias", lambda: w[f"{name}_bias"])
    return b.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=float(eps), name="layer_norm")
