"""The graph I/O contract: names, dtypes and shapes both the builder and the runtime derive from.

Decoder graphs take S new tokens and C cache slots, in one of two KV contracts:
- "rows" (the NPU graphs): the host masks, rotates and stores; the graph returns the new rows.
  input_ids [1,S] int32 · rope_cos/rope_sin [1,1,S,d/2] · attention_mask [1,1,S,C+S] (additive,
  bounded: MASK_VALUE, never -inf) · past_key_i [1,KV,d,C] (keys transposed) · past_value_i [1,KV,C,d]
  → logits [1,1,V] (last position only) · new_key_i [1,KV,d,S] · new_value_i [1,KV,S,d].
  Chunks are left-padded, so the last position is the last real token.
- "inplace" (the CPU target): ONNX Runtime's GroupQueryAttention writes the S new rows into the
  cache buffers at the filled length and attends over the filled length only.
  input_ids [1,S] int32 · last_index [R] int64 (the positions to score: the chunk's last token, or
  every drafted token of a prompt-lookup step) · seqlens_k [1] int32 (= filled + S - 1) ·
  total_sequence_length [] int32 (= filled + S) · past_key_i/past_value_i [1,KV,C,d] → logits [1,R,V] ·
  present_key_i/present_value_i [1,KV,C,d],
  bound to the very buffers given as past (ORT shares them when the addresses match). Padding
  rows (a right-padded chunk) would land past the filled length and be overwritten by the next
  step. Nothing in these graphs depends on S, so one file with a symbolic S serves every step
  size (one session, one copy of the prepacked weights) and the runtime runs each chunk at its
  exact length; the manifest still lists each bucket as a graph of its own, with R = 1. (Builds
  before 2026-12-03 declare R = 1 in the file too: they decode without drafts.)
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


def decoder_io(n_layers: int, n_kv_heads: int, head_dim: int, vocab: int, seq: int, context: int,
               kv_dtype: str = "float32", inplace: bool = False) -> GraphIO:
    """The "rows" contract, or with `inplace` the CPU target's (see the module docstring)."""
    kv, d, s, c = n_kv_heads, head_dim, seq, context
    outputs = [_t("logits", "float32", [1, 1, vocab])]
    if inplace:
        inputs = [_t("input_ids", "int32", [1, s]), _t("last_index", "int64", [1]),
                  _t("seqlens_k", "int32", [1]), _t("total_sequence_length", "int32", [])]
        for i in range(n_layers):
            inputs += [_t(f"past_key_{i}", kv_dtype, [1, kv, c, d]), _t(f"past_value_{i}", kv_dtype, [1, kv, c, d])]
            outputs += [_t(f"present_key_{i}", kv_dtype, [1, kv, c, d]), _t(f"present_value_{i}", kv_dtype, [1, kv, c, d])]
        return GraphIO(tuple(inputs), tuple(outputs))
    inputs = [
        _t("input_ids", "int32", [1, s]),
        _t("rope_cos", "float32", [1, 1, s, d // 2]),
        _t("rope_sin", "float32", [1, 1, s, d // 2]),
        _t("attention_mask", "float32", [1, 1, s, c + s]),
    ]
    for i in range(n_layers):
        inputs += [_t(f"past_key_{i}", kv_dtype, [1, kv, d, c]), _t(f"past_value_{i}", kv_dtype, [1, kv, c, d])]
        outputs += [_t(f"new_key_{i}", kv_dtype, [1, kv, d, s]), _t(f"new_value_{i}", kv_dtype, [1, kv, s, d])]
    return GraphIO(tuple(inputs), tuple(outputs))


def is_inplace(graph_inputs) -> bool:
    """Whether a decoder graph (its input specs) follows the "inplace" KV contract."""
    return any(t.name == "seqlens_k" for t in graph_inputs)


def contract_mismatch(manifest) -> str | None:
    """Why an LLM manifest's graphs do not follow this contract (a build from an older version),
    or None: names and shapes of every graph's I/O (types vary with quantization)."""
    a = manifest.architecture
    for g in manifest.graphs:
        want = decoder_io(a.n_layers, a.n_kv_heads, a.head_dim, a.vocab, g.seq, manifest.context,
                          inplace=is_inplace(g.inputs))
        for kind, have, expected in (("inputs", g.inputs, want.inputs), ("outputs", g.outputs, want.outputs)):
            if [(t.name, list(t.shape)) for t in have] != [(t.name, list(t.shape)) for t in expected]:
                return f"graph {g.name}'s {kind} differ from this version's graph contract"
    return None


def embedder_io(batch: int, seq: int, hidden: int) -> GraphIO:
    return GraphIO(
        (_t("input_ids", "int32", [batch, seq]), _t("attention_mask", "int32", [batch, seq])),
        (_t("embeddings", "float32", [batch, hidden]),),
    )


def rotary_tables(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [len(positions), head_dim/2] for rotate-half rotary: the host feeds rows of these
    as `rope_cos`/`rope_sin`, so NPU graphs hold no position arithmetic (CPU-target graphs keep
    the whole table as GroupQueryAttention's cos/sin cache)."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
