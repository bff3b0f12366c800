"""The static KV cache: one buffer per layer for the whole context, allocated once at load."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class StaticKVCache:
    """Keys as [1,KV,d,P] (transposed, as the graphs read them) and values as [1,KV,P,d].

    Graphs return only the rows of the new tokens; `write` copies them in at the current
    length, so nothing is reallocated or shifted per token.

    P (the slots the graphs see) is the whole context for static graphs. Graphs with a symbolic
    P (the CPU target) are given only a prefix of each buffer: `relayout(P)` re-strides the
    filled rows so that the first KV·d·P elements form a contiguous [1,KV,d,P] tensor. It runs
    when the length crosses a slot bucket (every 64 tokens), costing one copy of the filled rows,
    and lets every step's attention read P slots instead of the whole context.

    Quantized models keep the cache in the graphs' own quantized type (uint16): the graphs read
    and return raw quantized rows with one encoding shared by every graph, so rows are copied as
    they are, never converted. `fill` is what an empty slot holds: a scalar, or per layer a
    (key, value) pair: the zero points, so empty slots decode to 0.0 (they are masked anyway).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, slots: int, dtype=np.float32,
                 fill: float | Sequence[tuple[float, float]] | None = None):
        self.slots = slots
        self.dtype = np.dtype(dtype)
        self.kv, self.head_dim = n_kv_heads, head_dim
        fills = [(fill, fill)] * n_layers if fill is None or np.isscalar(fill) else list(fill)
        if len(fills) != n_layers:
            raise ValueError(f"fill needs one (key, value) pair per layer ({n_layers}), got {len(fills)}")
        size = n_kv_heads * head_dim * slots
        self._keys = [np.full(size, k or 0, self.dtype) for k, _ in fills]
        self._values = [np.full(size, v or 0, self.dtype) for _, v in fills]
        self._views: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self.stride = slots
        self.length = 0

    def views(self, stride: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per layer [1,KV,d,stride] keys and [1,KV,stride,d] values over the buffers' first
        elements (made once per stride: the same arrays every step, so I/O bindings stay valid)."""
        if stride not in self._views:
            kv, d, n = self.kv, self.head_dim, self.kv * self.head_dim * stride
            self._views[stride] = ([k[:n].reshape(1, kv, d, stride) for k in self._keys],
                                   [v[:n].reshape(1, kv, stride, d) for v in self._values])
        return self._views[stride]

    @property
    def keys(self) -> list[np.ndarray]:
        return self.views(self.stride)[0]

    @property
    def values(self) -> list[np.ndarray]:
        return self.views(self.stride)[1]

    def relayout(self, stride: int) -> None:
        """Re-stride the filled rows for graphs that see `stride` slots."""
        if stride == self.stride:
            return
        if not self.length <= stride <= self.slots:
            raise ValueError(f"cannot lay {self.length} cached tokens out over {stride} of {self.slots} slots")
        n = self.length
        old_k, old_v = self.views(self.stride)
        new_k, new_v = self.views(stride)
        for i in range(len(self._keys)):
            rows_k, rows_v = old_k[i][..., :n].copy(), old_v[i][:, :, :n, :].copy()  # the views overlap
            new_k[i][..., :n] = rows_k
            new_v[i][:, :, :n, :] = rows_v
        self.stride = stride

    def write(self, layer: int, new_key: np.ndarray, new_value: np.ndarray, count: int) -> None:
        """Store the last `count` new rows (prefill chunks are left-padded) at the current length."""
        if new_key.dtype != self.dtype or new_value.dtype != self.dtype:
            # a float row in a uint16 cache (or the reverse) would be silently converted: refuse
            raise TypeError(f"KV rows of type {new_key.dtype}/{new_value.dtype} cannot go into a {self.dtype} cache")
        start = self.length
        keys, values = self.views(self.stride)
        keys[layer][:, :, :, start:start + count] = new_key[:, :, :, -count:]
        values[layer][:, :, start:start + count, :] = new_value[:, :, -count:, :]

    def advance(self, count: int) -> None:
        self.length += count

    def truncate(self, length: int) -> None:
        """Forget everything after `length` tokens (stale rows are masked, never read)."""
        self.length = min(self.length, length)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._keys) + sum(a.nbytes for a in self._values)
