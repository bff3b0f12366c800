"""Linear layers and norms, the building blocks every family shares."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from build_scripts.graph.blocks import ACCURACY_LEVEL
from build_scripts.graph.builder import KQUANT_DOMAIN, MS_DOMAIN, GraphBuilder
from build_scripts.weights.loaders import Weights


def linear(b: GraphBuilder, x: str, w: Weights, name: str, scale: float = 1.0,
           bias: bool = False) -> str:
    """
        x ──MatMul(Wᵀ·scale)──(+ bias·scale)──►

    Weights are stored transposed ([in, out]) so MatMul needs no Transpose; `scale` folds a
    constant factor (attention's 1/√d) into the weights instead of adding a Mul node. With a
    block recipe (the CPU target) the weight is block-quantized instead: see block_matmul.
    """
    if b.blocks is not None:
        y = block_matmul(b, x, [(name, scale)])
    else:
        wt = b.weight(f"{name}.weight_t", _scaled(lambda: w[name].T, scale))
        y = b.node("MatMul", [x, wt], name=name.rsplit(".", 1)[-1])
    if bias:
        y = b.node("Add", [y, b.weight(f"{name}.bias", _scaled(lambda: w[f"{name}_bias"], scale))])
    return y


def linears(b: GraphBuilder, x: str, w: Weights, names: list[str], scales: list[float] | None = None,
            bias: bool = False) -> list[str]:
    """Several linear layers reading the same x (q/k/v, gate/up). On the CPU target they run as
    one MatMulNBits over their stacked blocks, then a Split: fewer, larger kernels (per-node
    overhead dominates a small model's decode step)."""
    scales = scales or [1.0] * len(names)
    if b.blocks is None or not b.blocks.fusable(names):
        return [linear(b, x, w, n, s, bias) for n, s in zip(names, scales)]
    y = stacked_linear(b, x, w, names, scales, bias)
    sizes = [b.blocks.rows[n] for n in names]
    return b.node("Split", [y, b.ints(*sizes)], n_out=len(names), axis=-1)


def stacked_linear(b: GraphBuilder, x: str, w: Weights, names: list[str], scales: list[float] | None = None,
                   bias: bool = False) -> str:
    """The outputs of several linear layers concatenated ([.., Σ out]) from one MatMulNBits over
    their stacked blocks (the CPU target; the caller checks `b.blocks.fusable(names)`)."""
    scales = scales or [1.0] * len(names)
    y = block_matmul(b, x, list(zip(names, scales)))
    if bias:
        y = b.node("Add", [y, b.weight("+".join(names) + ".bias", lambda: np.concatenate(
            [w[f"{n}_bias"] * np.float32(s) for n, s in zip(names, scales)]).astype(np.float32))])
    return y


def block_matmul(b: GraphBuilder, x: str, parts: list[tuple[str, float]]) -> str:
    """
        x ──KQuantMatMul(the GGUF's Q4_K / Q6_K rows)──►                   (hexrag's kernels: runtime/kquant)
        x ──MatMulNBits(codes, scales, zero points)──(+ block_sums(x)·minsᵀ)──►      (anything else)

    `parts`: the layers (name, constant folded in) whose blocks are stacked into this weight.
    The blocks are shared by every graph of the model; the min term exists only for GGUF types
    with a per-block min (Q4_1, Q4_K), see graph/blocks.py.
    """
    key = "+".join(name for name, _ in parts)
    short = "_".join(name.rsplit(".", 1)[-1] for name, _ in parts)
    raw = b.blocks.raw(parts)
    if raw is not None:  # the GGUF's own blocks, read by hexrag's K-quant kernels (runtime/kquant)
        return b.node("KQuantMatMul", [x, b.weight(f"{key}.kq", lambda: raw.rows)], domain=KQUANT_DOMAIN,
                      name=short, ggml_type=raw.ggml_type, N=raw.n, K=raw.k, alpha=float(raw.alpha))
    made = []

    def blocks():
        if not made:
            made.append(b.blocks.make(parts))
        return made[0]

    inputs = [x, b.weight(f"{key}.codes", lambda: blocks().codes), b.weight(f"{key}.scales", lambda: blocks().scales)]
    bits, block, n, k, has_zero, has_mins = b.blocks.shapes[key]  # set once any graph made the blocks
    if has_zero:
        inputs.append(b.weight(f"{key}.zero_points", lambda: blocks().packed_zero_points()))
    y = b.node("MatMulNBits", inputs, domain=MS_DOMAIN, name=short,
               K=k, N=n, bits=bits, block_size=block, accuracy_level=ACCURACY_LEVEL)
    if has_mins:
        sums = b.block_sums(x, k, block)
        y = b.node("Add", [y, b.node("MatMul", [sums, b.weight(f"{key}.mins_t", lambda: blocks().mins.T.copy())],
                                     name=f"{short}_mins")])
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
