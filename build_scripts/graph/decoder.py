"""Llama / Qwen2 decoder graphs with the NPU contract: static shapes, KV cache as graph I/O.

One graph per step shape: prefill AR-N (S = N) and decode AR-1 (S = 1), all over the same
C cache slots so the host binds one preallocated buffer per layer to every graph.

    input_ids [1,S] ─Gather(embed)─► h ─┬─ L × ( h += attn(rms(h)); h += mlp(rms(h)) )
    rope_cos/rope_sin [1,1,S,d/2]       │
    attention_mask [1,1,S,C+S]          └─ Slice(last position) ─ rms ─ Gemm(lm_headᵀ) ─► logits [1,1,V]
    past_key_i [1,KV,d,C], past_value_i [1,KV,C,d]  ──►  new_key_i [1,KV,d,S], new_value_i [1,KV,S,d]

The CPU target (a block recipe) builds the same dataflow with ONNX Runtime's fused kernels and
the "inplace" KV contract of models/contract.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from tqdm import tqdm

from build_scripts.config import DecoderConfig
from build_scripts.graph.attention import decoder_attention, inplace_attention
from build_scripts.graph.builder import KQUANT_DOMAIN, GraphBuilder, WeightStore
from build_scripts.graph.blocks import BlockRecipe
from build_scripts.graph.linear import block_matmul, rms_norm
from build_scripts.graph.mlp import gated_silu_mlp
from build_scripts.weights.loaders import Weights
from models.contract import decoder_io, rotary_tables

_ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
         "uint16": TensorProto.UINT16}


def build_decoder_graph(name: str, store: WeightStore, w: Weights, cfg: DecoderConfig, seq: int,
                        context: int, progress: bool = False, blocks: BlockRecipe | None = None) -> onnx.ModelProto:
    """`blocks`: the CPU target's block recipe: linear layers and LM head as MatMulNBits, attention
    as GroupQueryAttention over the "inplace" KV contract (models/contract.py), in one graph for
    every step size (`seq` is ignored: S is symbolic)."""
    cpu = blocks is not None
    io = decoder_io(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.vocab, seq, context, inplace=cpu)
    b = GraphBuilder(name, store, blocks)
    # the CPU target's one graph: S tokens in, the logits of the R positions `last_index` lists out
    symbolic = {"input_ids": [1, "S"], "last_index": ["R"], "logits": [1, "R", cfg.vocab]} if cpu else {}
    inp = {t.name: b.input(t.name, _ELEM[t.dtype], symbolic.get(t.name, t.shape)) for t in io.inputs}
    kv_out = ("present_key", "present_value") if cpu else ("new_key", "new_value")

    if not cpu:
        h = b.node("Gather", [b.weight("embed", lambda: w["embed"]), inp["input_ids"]], axis=0, name="embed")
        mask = inp["attention_mask"]
        if cfg.kv_groups > 1:
            # rows of the folded GQA scores are (group, position): repeat the mask once per group
            mask = b.node("Concat", [mask] * cfg.kv_groups, axis=2, name="mask_per_group")
    elif (raw := blocks.raw([("embed", 1.0)], linear=False)) is not None:  # the GGUF's own K-quant rows
        h = b.node("KQuantGather", [inp["input_ids"], b.weight("embed.kq", lambda: raw.rows)],
                   domain=KQUANT_DOMAIN, name="embed", ggml_type=raw.ggml_type, N=raw.n, K=raw.k)
    else:  # one row per token is read: float16 halves the table for free
        table = b.weight("embed.f16", lambda: w["embed"].astype(np.float16))
        h = b.node("Cast", [b.node("Gather", [table, inp["input_ids"]], axis=0, name="embed")], to=TensorProto.FLOAT)
    if cpu:
        cos, sin = rotary_tables(np.arange(context), cfg.head_dim, cfg.rope_theta)
        cos_cache, sin_cache = b.weight("rope.cos", lambda: cos), b.weight("rope.sin", lambda: sin)

    for i in tqdm(range(cfg.n_layers), desc=f"graph {name}", unit="layer", disable=not progress, leave=False):
        with b.scope(f"layers.{i}"):
            with b.scope("attn"):
                x = rms_norm(b, h, w, f"layers.{i}.attn_norm", cfg.rms_eps)
                past = inp[f"past_key_{i}"], inp[f"past_value_{i}"]
                if cpu:
                    a, k, v = inplace_attention(b, x, w, cfg, i, cos_cache, sin_cache, inp["seqlens_k"],
                                                inp["total_sequence_length"], *past)
                else:
                    a, k, v = decoder_attention(b, x, w, cfg, i, seq, context, inp["rope_cos"], inp["rope_sin"],
                                                mask, *past)
                h = b.node("Add", [h, a], name="residual")
            with b.scope("mlp"):
                m = gated_silu_mlp(b, rms_norm(b, h, w, f"layers.{i}.mlp_norm", cfg.rms_eps), w, f"layers.{i}")
                h = b.node("Add", [h, m], name="residual")
        for value, out in zip((k, v), kv_out):
            b.output(value, f"{out}_{i}", TensorProto.FLOAT, io.output(f"{out}_{i}").shape)

    with b.scope("head"):
        # only the positions asked for: the LM head dominates the cost otherwise
        if cpu:  # the host lists them: the last real token, or every drafted one (runtime/lookup.py)
            h = b.node("Gather", [h, inp["last_index"]], axis=1, name="last_position")
        elif seq > 1:  # left-padded chunks: it is the last position
            h = b.node("Slice", [h, b.ints(seq - 1), b.ints(seq), b.ints(1)], name="last_position")
        rows = -1 if cpu else 1  # the NPU graphs keep every shape static
        h = b.node("Reshape", [rms_norm(b, h, w, "norm", cfg.rms_eps), b.ints(rows, cfg.hidden)])
        head = "embed" if cfg.tied_embeddings else "lm_head"
        if not cpu:
            logits = b.node("Gemm", [h, b.weight(head, lambda: w[head])], transB=1, name="lm_head")
        else:
            logits = block_matmul(b, h, [(head, 1.0)])
        logits = b.node("Reshape", [logits, b.ints(1, rows, cfg.vocab)])
    # logits go first among the outputs, as readers expect
    b.output(logits, "logits", TensorProto.FLOAT, symbolic.get("logits", io.output("logits").shape))
    b.outputs.insert(0, b.outputs.pop())
    return b.model(doc=f"hexrag {cfg.arch} decoder, S={'any' if cpu else seq}, C={context}")
