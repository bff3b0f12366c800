"""The static KV cache: one buffer per layer for the whole context, allocated once at load."""

from __future__ import annotations

import numpy as np


class StaticKVCache:
    """Keys as [1,KV,d,C] (transposed, as the graphs read them) and values as [1,KV,C,d].

    Graphs return only the rows of the new tokens; `write` copies them in at the current
    length, so nothing is reallocated or shifted per token.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, slots: int, dtype=np.float32):
        self.slots = slots
        self.keys = [np.zeros((1, n_kv_heads, head_dim, slots), dtype) for _ in range(n_layers)]
        self.values = [np.zeros((1, n_kv_heads, slots, head_dim), dtype) for _ in range(n_layers)]
        self.length = 0

    def write(self, layer: int, new_key: np.ndarray, new_value: np.ndarray, count: int) -> None:
        """Store the last `count` new rows (prefill chunks are left-padded) at the current length."""
        start = self.length
        self.keys[layer][:, :, :, start:start + count] = new_key[:, :, :, -count:]
        self.values[layer][:, :, start:start + count, :] = new_value[:, :, -count:, :]

    def advance(self, count: int) -> None:
        self.length += count

    def truncate(self, length: int) -> None:
        """Forget everything after `length` tokens (stale rows are masked, never read)."""
        self.length = min(self.length, length)
