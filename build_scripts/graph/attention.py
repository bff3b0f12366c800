"""Attention blocks: the decoder's static-KV attention and BERT's bidirectional attention."""

from __future__ import annotations

import math
from dataclasses import dataclass

from build_scripts.config import BertConfig, DecoderConfig
from build_scripts.graph.builder import GraphBuilder
from build_scripts.graph.linear import linear, linears
from build_scripts.graph.rope import apply_rotary, rotary_embedding
from build_scripts.weights.loaders import Weights


@dataclass(frozen=True)
class StepShapes:
    """Static shapes of one decoder graph: S new tokens attending to C cache slots plus themselves."""

    seq: int  # S
    context: int  # C: cache slots (the past-KV length P of the graph contract)
    dynamic_past: bool = False  # P symbolic (the CPU target): the runtime binds the filled prefix


def decoder_attention(b: GraphBuilder, x: str, w: Weights, cfg: DecoderConfig, layer: int, shapes: StepShapes,
                      cos: str, sin: str, mask: str, past_key: str, past_value: str) -> tuple[str, str, str]:
    """
    Returns (attention output [1,S,hidden], new_key [1,KV,d,S], new_value [1,KV,S,d]).

        q ─rope─► [1,KV,G·S,d] ─┬─MatMul(past_key [1,KV,d,C]) ─┐
                                 └─MatMul(new_key  [1,KV,d,S]) ─┴─Concat─+mask─Softmax─Split─┐
        o = p_past·past_value + p_new·new_value ◄───────────────────────────────────────────┘

    GQA folds the G query heads of each KV head into the row axis with a Reshape, so K/V are
    never repeated (HTP has no cheap Expand); scores against the cache and against the new
    tokens are computed separately so the cache is never copied into a concatenated tensor.
    Keys are stored transposed ([d, slots]) so neither MatMul needs a Transpose of the cache.
    On the CPU target (a block recipe) cos/sin come as [S, d/2] for the fused rotary kernel.
    """
    s, c, d, kv, g = shapes.seq, shapes.context, cfg.head_dim, cfg.n_kv_heads, cfg.kv_groups
    p = f"layers.{layer}"
    bias = cfg.qkv_bias
    q, k, v = linears(b, x, w, [f"{p}.q", f"{p}.k", f"{p}.v"], [1.0 / math.sqrt(d), 1.0, 1.0], bias=bias)

    if b.blocks is not None:  # the CPU target: ONNX Runtime's fused rotary kernel on [1,S,heads·d]
        q = b.node("Transpose", [b.node("Reshape", [rotary_embedding(b, q, cos, sin, cfg.n_heads, s),
                                                    b.ints(1, s, cfg.n_heads, d)])], perm=[0, 2, 1, 3])
        q = b.node("Reshape", [q, b.ints(1, kv, g * s, d)])
        k = b.node("Reshape", [rotary_embedding(b, k, cos, sin, kv, s), b.ints(1, s, kv, d)])
        new_key = b.node("Transpose", [k], perm=[0, 2, 3, 1])
    else:
        q = b.node("Transpose", [b.node("Reshape", [q, b.ints(1, s, cfg.n_heads, d)])], perm=[0, 2, 1, 3])
        q = b.node("Reshape", [apply_rotary(b, q, cos, sin, d), b.ints(1, kv, g * s, d)])
        k = b.node("Transpose", [b.node("Reshape", [k, b.ints(1, s, kv, d)])], perm=[0, 2, 1, 3])
        new_key = b.node("Transpose", [apply_rotary(b, k, cos, sin, d)], perm=[0, 1, 3, 2])
    new_value = b.node("Transpose", [b.node("Reshape", [v, b.ints(1, s, kv, d)])], perm=[0, 2, 1, 3])

    scores = b.node("Concat", [b.node("MatMul", [q, past_key]), b.node("MatMul", [q, new_key])], axis=-1)
    probs = b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1)
    if shapes.dynamic_past:  # P is unknown here: cut the last S columns off by negative index
        p_past = b.node("Slice", [probs, b.ints(0), b.ints(-s), b.ints(-1)], name="probs_past")
        p_new = b.node("Slice", [probs, b.ints(-s), b.ints(2**62), b.ints(-1)], name="probs_new")
    else:
        p_past, p_new = b.node("Split", [probs, b.ints(c, s)], n_out=2, axis=-1)
    o = b.node("Add", [b.node("MatMul", [p_past, past_value]), b.node("MatMul", [p_new, new_value])])
    o = b.node("Reshape", [o, b.ints(1, cfg.n_heads, s, d)])
    o = b.node("Reshape", [b.node("Transpose", [o], perm=[0, 2, 1, 3]), b.ints(1, s, cfg.n_heads * d)])
    return linear(b, o, w, f"{p}.o"), new_key, new_value


def bert_attention(b: GraphBuilder, x: str, w: Weights, cfg: BertConfig, layer: int, batch: int, seq: int,
                   mask: str) -> str:
    """Bidirectional self-attention with an additive [B,1,1,L] padding mask."""
    h, d = cfg.n_heads, cfg.head_dim
    p = f"layers.{layer}"

    def heads(t: str, perm: list[int]) -> str:
        return b.node("Transpose", [b.node("Reshape", [t, b.ints(batch, seq, h, d)])], perm=perm)

    q = heads(linear(b, x, w, f"{p}.q", scale=1.0 / math.sqrt(d), bias=True), [0, 2, 1, 3])
    k_t = heads(linear(b, x, w, f"{p}.k", bias=True), [0, 2, 3, 1])
    v = heads(linear(b, x, w, f"{p}.v", bias=True), [0, 2, 1, 3])
    probs = b.node("Softmax", [b.node("Add", [b.node("MatMul", [q, k_t]), mask])], axis=-1)
    o = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return linear(b, b.node("Reshape", [o, b.ints(batch, seq, cfg.hidden)]), w, f"{p}.o", bias=True)
