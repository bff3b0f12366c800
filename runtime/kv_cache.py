"""The static KV cache: one buffer per layer for the whole context, allocated once at load."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class StaticKVCache:
    """Per layer, keys and values for every slot of the context, in the layout the graphs read:

    - "rows" contract (NPU graphs): keys [1,KV,d,C] (transposed, so attention needs no Transpose),
      values [1,KV,C,d]. Graphs return only the rows of the new tokens; `write` copies them in at
      the current length, so nothing is reallocated or shifted per token.
    - "inplace" contract (the CPU target, `keys_transposed=False`): keys and values [1,KV,C,d].
      The graphs write their new rows into these very buffers themselves.

    Quantized models keep the cache in the graphs' own quantized type (uint16): the graphs read
    and return raw quantized rows with one encoding shared by every graph, so rows are copied as
    they are, never converted. `fill` is what an empty slot holds: a scalar, or per layer a
    (key, value) pair: the zero points, so empty slots decode to 0.0 (they are masked anyway).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, slots: int, dtype=np.float32,
                 fill: float | Sequence[tuple[float, float]] | None = None, keys_transposed: bool = True):
        self.slots = slots
        self.dtype = np.dtype(dtype)
        fills = [(fill, fill)] * n_layers if fill is None or np.isscalar(fill) else list(fill)
        if len(fills) != n_layers:
            raise ValueError(f"fill needs one (key, value) pair per layer ({n_layers}), got {len(fills)}")
        rows = (1, n_kv_heads, slots, head_dim)
        key_shape = (1, n_kv_heads, head_dim, slots) if keys_transposed else rows
        self.keys = [np.full(key_shape, k or 0, self.dtype) for k, _ in fills]
        self.values = [np.full(rows, v or 0, self.dtype) for _, v in fills]
        self.length = 0

    def write(self, layer: int, new_key: np.ndarray, new_value: np.ndarray, count: int) -> None:
        """Store the last `count` new rows (prefill chunks are left-padded) at the current length."""
        if new_key.dtype != self.dtype or new_value.dtype != self.dtype:
            # a float row in a uint16 cache (or the reverse) would be silently converted: refuse
            raise TypeError(f"KV rows of type {new_key.dtype}/{new_value.dtype} cannot go into a {self.dtype} cache")
        start = self.length
        self.keys[layer][:, :, :, start:start + count] = new_key[:, :, :, -count:]
        self.values[layer][:, :, start:start + count, :] = new_value[:, :, -count:, :]

    def advance(self, count: int) -> None:
        self.length += count

    def truncate(self, length: int) -> None:
        """Forget everything after `length` tokens (stale rows are masked or overwritten, never read)."""
        self.length = min(self.length, length)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)
