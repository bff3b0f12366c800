"""GPTQ rounding of linear weights (Frantar et al., 2022), in numpy.

Round-to-nearest puts every weight on the grid independently; GPTQ rounds the input dimension
one column at a time and pushes each rounding error onto the columns not yet rounded, weighted by
the inverse Hessian H = Xᵀ X of the layer's calibration inputs, so the layer's OUTPUT on real
activations moves as little as possible. The grid is unchanged (the same per-channel or per-block
symmetric scales, from the float weights), so the result is an ordinary int8 per-channel or int4
block weight: nothing changes for the quantizer, the graph or HTP.

Measured on SmolLM2-135M (weights only, activations float): int8 per channel, round-to-nearest
94.3% greedy agreement with float (logits cosine 0.99918); GPTQ 98.6% (0.99975).
"""

from __future__ import annotations

import numpy as np


class HessianStore:
    """Running Xᵀ X per linear-input tensor, over the real (unpadded) rows of every run.

    Rows are buffered and folded in with one matrix product per `flush_rows` rows: decode steps
    bring one row each, and a K x K update per row would cost more than the calibration itself."""

    def __init__(self, flush_rows: int = 512):
        self.flush_rows = flush_rows
        self._h: dict[str, np.ndarray] = {}
        self._pending: dict[str, list[np.ndarray]] = {}
        self._pending_rows: dict[str, int] = {}
        self.rows: dict[str, int] = {}

    def add(self, name: str, x: np.ndarray, real_rows: np.ndarray | None = None) -> None:
        """Rows of `x` ([..., K]) that are real tokens (`real_rows`: a mask over the flattened rows)."""
        x = x.reshape(-1, x.shape[-1])
        if real_rows is not None and len(real_rows) == len(x):
            x = x[real_rows]
        if not len(x):
            return
        self._pending.setdefault(name, []).append(np.array(x, np.float32, copy=True))
        self._pending_rows[name] = self._pending_rows.get(name, 0) + len(x)
        self.rows[name] = self.rows.get(name, 0) + len(x)
        if self._pending_rows[name] >= self.flush_rows:
            self._flush(name)

    def _flush(self, name: str) -> None:
        chunks = self._pending.pop(name, [])
        self._pending_rows[name] = 0
        if chunks:
            # float32 sums: a 1.5B model's 28 down-projection Hessians (8960²) alone are 9 GB so, 18 as float64
            x = np.concatenate(chunks)
            h = self._h.get(name)
            self._h[name] = x.T @ x if h is None else h + x.T @ x

    @property
    def h(self) -> dict[str, np.ndarray]:
        for name in list(self._pending):
            self._flush(name)
        return self._h


def code_range(bits: int) -> tuple[int, int]:
    """(qmin, qmax) of symmetric signed codes: int4 uses [-8, 7]; int8 uses [-127, 127], as
    onnxruntime does."""
    qmax = 2 ** (bits - 1) - 1
    return (-qmax - 1 if bits == 4 else -qmax), qmax


LPBQ_LEVELS = 16  # HTP's LPBQ: a block's scale is its channel's scale times an integer 1..16


def lpbq_scales(scales: np.ndarray, channel_axis: int) -> np.ndarray:
    """Block scales HTP can hold exactly. QNN stores block weights as LPBQ: per channel a float
    scale (the largest block scale / 16) and per block a 4-bit integer multiple of it; the QNN EP
    rounds arbitrary block scales to that grid, so weights rounded on other scales would not be
    the weights the NPU runs. Each scale goes up to the next multiple (never down: no clipping)."""
    blocks_axis = 1 - channel_axis
    unit = scales.max(axis=blocks_axis, keepdims=True) / LPBQ_LEVELS
    unit = np.where(unit > 0, unit, 1.0)
    steps = np.clip(np.ceil(scales / unit - 1e-6), 1, LPBQ_LEVELS)
    return (steps * unit).astype(scales.dtype)


def block_scales(amax: np.ndarray, bits: int, channel_axis: int) -> np.ndarray:
    """Symmetric block scales from each block's largest |weight|: int4 ones on the LPBQ grid (see
    lpbq_scales). int8 blocks keep their own: the QNN EP does not round those (measured: the
    simulator matches the CPU with arbitrary int8 block scales, while int4 ones needed the grid)."""
    s = np.where(amax > 0, amax / code_range(bits)[1], 1.0)
    return lpbq_scales(s, channel_axis) if bits == 4 else s


def scales(w_nk: np.ndarray, bits: int, group: int | None) -> np.ndarray:
    """Symmetric scales from the float weights: [N] per output channel, or [N, K/group] per block
    (see block_scales)."""
    if group:
        n, k = w_nk.shape
        return block_scales(np.abs(w_nk.reshape(n, k // group, group)).max(axis=2), bits, channel_axis=0)
    amax = np.abs(w_nk).max(axis=1)
    return np.where(amax > 0, amax / code_range(bits)[1], 1.0)


def gptq(w_kn: np.ndarray, h: np.ndarray, bits: int = 8, group: int | None = None, damp: float = 0.01,
         block: int = 128, act_order: bool = True, qmin: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ for a MatMul weight stored [K (in), N (out)] with input Hessian `h` [K, K].

    Returns (q [K, N] int8 grid values, scale): scale [N] (per channel) or [K/group, N] (blocks
    along K, the LPBQ layout); q·scale is the quantized weight."""
    lowest, qmax = code_range(bits)
    qmin = lowest if qmin is None else qmin
    w = w_kn.T.astype(np.float64).copy()  # [N, K]
    n, k = w.shape
    s = scales(w, bits, group)  # fixed before any update: the grid stays that of the float weights
    h = h.astype(np.float64).copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    w, h = w[:, perm], h[perm][:, perm]
    h[np.diag_indices(k)] += damp * np.mean(np.diag(h))
    try:
        hinv = np.linalg.cholesky(np.linalg.inv(h)).T  # upper Cholesky factor of H⁻¹
    except np.linalg.LinAlgError:
        h[np.diag_indices(k)] += np.mean(np.diag(h))  # badly conditioned: damp harder
        hinv = np.linalg.cholesky(np.linalg.inv(h)).T
    col_scale = (lambda j: s[:, perm[j] // group]) if group else (lambda j: s)
    q = np.zeros((n, k), np.int8)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        w1 = w[:, i1:i2].copy()
        err = np.zeros_like(w1)
        hb = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            sc = col_scale(i1 + i)
            qi = np.clip(np.rint(w1[:, i] / sc), qmin, qmax)
            q[:, i1 + i] = qi
            e = (w1[:, i] - qi * sc) / hb[i, i]
            w1[:, i:] -= np.outer(e, hb[i, i:])
            err[:, i] = e
        w[:, i2:] -= err @ hinv[i1:i2, i2:]
    q = q[:, np.argsort(perm)]
    return q.T.copy(), (s.T.copy() if group else s)
