"""Attention blocks: the decoder's static-KV attention (NPU and CPU-target contracts) and BERT's."""

from __future__ import annotations

import math

from build_scripts.config import BertConfig, DecoderConfig
from build_scripts.graph.builder import MS_DOMAIN, GraphBuilder
from build_scripts.graph.linear import linear, linears, stacked_linear
from build_scripts.graph.rope import apply_rotary
from build_scripts.weights.loaders import Weights


def decoder_attention(b: GraphBuilder, x: str, w: Weights, cfg: DecoderConfig, layer: int, seq: int, context: int,
                      cos: str, sin: str, mask: str, past_key: str, past_value: str) -> tuple[str, str, str]:
    """
    The NPU graphs' attention ("rows" contract). Returns (attention output [1,S,hidden],
    new_key [1,KV,d,S], new_value [1,KV,S,d]).

        q ─rope─► [1,KV,G·S,d] ─┬─MatMul(past_key [1,KV,d,C]) ─┐
                                 └─MatMul(new_key  [1,KV,d,S]) ─┴─Concat─+mask─Softmax─Split─┐
        o = p_past·past_value + p_new·new_value ◄───────────────────────────────────────────┘

    GQA folds the G query heads of each KV head into the row axis with a Reshape, so K/V are
    never repeated (HTP has no cheap Expand); scores against the cache and against the new
    tokens are computed separately so the cache is never copied into a concatenated tensor.
    Keys are stored transposed ([d, slots]) so neither MatMul needs a Transpose of the cache.
    """
    s, c, d, kv, g = seq, context, cfg.head_dim, cfg.n_kv_heads, cfg.kv_groups
    p = f"layers.{layer}"
    q, k, v = linears(b, x, w, [f"{p}.q", f"{p}.k", f"{p}.v"], [1.0 / math.sqrt(d), 1.0, 1.0], bias=cfg.qkv_bias)
    q = b.node("Transpose", [b.node("Reshape", [q, b.ints(1, s, cfg.n_heads, d)])], perm=[0, 2, 1, 3])
    q = b.node("Reshape", [apply_rotary(b, q, cos, sin, d), b.ints(1, kv, g * s, d)])
    k = b.node("Transpose", [b.node("Reshape", [k, b.ints(1, s, kv, d)])], perm=[0, 2, 1, 3])
    new_key = b.node("Transpose", [apply_rotary(b, k, cos, sin, d)], perm=[0, 1, 3, 2])
    new_value = b.node("Transpose", [b.node("Reshape", [v, b.ints(1, s, kv, d)])], perm=[0, 2, 1, 3])

    scores = b.node("Concat", [b.node("MatMul", [q, past_key]), b.node("MatMul", [q, new_key])], axis=-1)
    probs = b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1)
    p_past, p_new = b.node("Split", [probs, b.ints(c, s)], n_out=2, axis=-1)
    o = b.node("Add", [b.node("MatMul", [p_past, past_value]), b.node("MatMul", [p_new, new_value])])
    o = b.node("Reshape", [o, b.ints(1, cfg.n_heads, s, d)])
    o = b.node("Reshape", [b.node("Transpose", [o], perm=[0, 2, 1, 3]), b.ints(1, s, cfg.n_heads * d)])
    return linear(b, o, w, f"{p}.o"), new_key, new_value


def inplace_attention(b: GraphBuilder, x: str, w: Weights, cfg: DecoderConfig, layer: int, cos_cache: str,
                      sin_cache: str, seqlens_k: str, total: str, past_key: str, past_value: str) -> tuple[str, str, str]:
    """
    The CPU target's attention ("inplace" contract): one com.microsoft GroupQueryAttention node.

        x ─MatMulNBits(q|k|v stacked)─► packed qkv ─GroupQueryAttention(rotary, causal, GQA)─► o ─o_proj─►
                         past_key/past_value [1,KV,C,d] ══ present_key/present_value (one buffer)

    The kernel rotates q and k at positions filled..filled+S-1 (cos/sin caches [C, d/2] are
    initializers), writes the new rows into the shared cache buffers and attends over the
    filled length only, so a step's attention cost follows the tokens actually cached.
    Returns (output [1,S,hidden], present_key, present_value).
    """
    p = f"layers.{layer}"
    names = [f"{p}.q", f"{p}.k", f"{p}.v"]
    if b.blocks.fusable(names):  # packed: the kernel splits q|k|v itself
        qkv = [stacked_linear(b, x, w, names, bias=cfg.qkv_bias), "", ""]
    else:  # e.g. Q4_K_M files keep v at 6 bits: three weights, three inputs
        qkv = [linear(b, x, w, n, bias=cfg.qkv_bias) for n in names]
    # present_* are graph outputs straight from the kernel: behind any other node they would be
    # intermediates, the kernel could not share the bound cache buffer and would copy the whole
    # cache into a fresh one every step
    o, present_key, present_value = b.node(
        "GroupQueryAttention", [*qkv, past_key, past_value, seqlens_k, total, cos_cache, sin_cache], n_out=3,
        outputs=[None, f"present_key_{layer}", f"present_value_{layer}"],
        domain=MS_DOMAIN, num_heads=cfg.n_heads, kv_num_heads=cfg.n_kv_heads, do_rotary=1, rotary_interleaved=0)
    return linear(b, o, w, f"{p}.o"), present_key, present_value


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
