"""The static KV cache: one buffer per layer for the whole context, allocated once at load."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
        self.keys_transposed = keys_transposed
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

    def read(self, start: int, end: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Copies of the rows of slots start..end-1, per layer keys and values as [KV, n, d]."""
        keys = [(k[0, :, :, start:end].swapaxes(-1, -2) if self.keys_transposed else k[0, :, start:end]).copy()
                for k in self.keys]
        return keys, [v[0, :, start:end].copy() for v in self.values]

    def put(self, layer: int, key: np.ndarray, value: np.ndarray) -> None:
        """Store rows [KV, n, d] at the current length (converted to the cache's type)."""
        start, n = self.length, key.shape[-2]
        if self.keys_transposed:
            self.keys[layer][0, :, :, start:start + n] = key.swapaxes(-1, -2)
        else:
            self.keys[layer][0, :, start:start + n] = key
        self.values[layer][0, :, start:start + n] = value

    def advance(self, count: int) -> None:
        self.length += count

    def truncate(self, length: int) -> None:
        """Forget everything after `length` tokens (stale rows are masked or overwritten, never read)."""
        self.length = min(self.length, length)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)


@dataclass
class KVRows:
    """The cache rows a run of tokens left, per layer keys and values [KV, n, d] (keys already
    rotated for positions start..start+n-1), kept to be placed again later (passage KV)."""

    tokens: list[int]
    start: int
    keys: list[np.ndarray]
    values: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)


def rerotate(keys: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Keys [..., n, d] rotated (rotate-half rotary) by one more angle per frequency, cos/sin [d/2]:
    rotations compose, so keys rotated for position p become keys for p + delta when cos/sin are
    those of delta (models/contract.rotary_tables)."""
    half = keys.shape[-1] // 2
    k1, k2 = keys[..., :half], keys[..., half:]
    return np.concatenate([k1 * cos - k2 * sin, k2 * cos + k1 * sin], axis=-1)
