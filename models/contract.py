"""The graph I/O contract: names, dtypes and shapes both the builder and the runtime derive from.

Decoder graphs take S new tokens and C cache slots:
  input_ids [1,S] int32 · rope_cos/rope_sin [1,1,S,d/2] · attention_mask [1,1,S,C+S] (additive,
  bounded: MASK_VALUE, never -inf) · past_key_i [1,KV,d,C] (keys transposed) · past_value_i [1,KV,C,d]
  → logits [1,1,V] (last position only) · new_key_i [1,KV,d,S] · new_value_i [1,KV,S,d].
Embedder graphs: input_ids, attention_mask [B,L] int32 → embeddings [B,H] (mean pooled, L2 normalised).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.manifest import TensorSpec

MASK_VALUE = -100.0  # bounded: a float-min mask wrecks quantization scales


@dataclass(frozen=True)
class GraphIO:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        return next(t for t in self.inputs if t.name == name)

    def output(self, name: str) -> TensorSpec:
        return next(t for t in self.outputs if t.name == name)


def _t(name: str, dtype: str, shape: list[int]) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)


DYNAMIC = -1  # a symbolic dimension in a TensorSpec shape (ONNX dim_param)


def decoder_io(n_layers: int, n_kv_heads: int, head_dim: int, vocab: int, seq: int, context: int,
               kv_dtype: str = "float32", dynamic_past: bool = False) -> GraphIO:
    """`dynamic_past` (the CPU target): the cache-slot dimension P is symbolic (DYNAMIC), so the
    runtime can bind just the filled prefix of its static buffers; HTP graphs are fully static."""
    kv, d, s = n_kv_heads, head_dim, seq
    c = DYNAMIC if dynamic_past else context
    inputs = [
        _t("input_ids", "int32", [1, s]),
        _t("rope_cos", "float32", [1, 1, s, d // 2]),
        _t("rope_sin", "float32", [1, 1, s, d // 2]),
        _t("attention_mask", "float32", [1, 1, s, DYNAMIC if dynamic_past else c + s]),
    ]
    outputs = [_t("logits", "float32", [1, 1, vocab])]
    for i in range(n_layers):
        inputs += [_t(f"past_key_{i}", kv_dtype, [1, kv, d, c]), _t(f"past_value_{i}", kv_dtype, [1, kv, c, d])]
        outputs += [_t(f"new_key_{i}", kv_dtype, [1, kv, d, s]), _t(f"new_value_{i}", kv_dtype, [1, kv, s, d])]
    return GraphIO(tuple(inputs), tuple(outputs))


def embedder_io(batch: int, seq: int, hidden: int) -> GraphIO:
    return GraphIO(
        (_t("input_ids", "int32", [batch, seq]), _t("attention_mask", "int32", [batch, seq])),
        (_t("embeddings", "float32", [batch, hidden]),),
    )


def rotary_tables(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [len(positions), head_dim/2] for rotate-half rotary: the host feeds rows of these
    as `rope_cos`/`rope_sin`, so the graph holds no position arithmetic."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
