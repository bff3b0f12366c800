"""Llama / Qwen2 decoder graphs with the NPU contract: static shapes, KV cache as graph I/O.

One graph per step shape: prefill AR-N (S = N) and decode AR-1 (S = 1), all over the same
C cache slots so the host binds one preallocated buffer per layer to every graph.

    input_ids [1,S] ─Gather(embed)─► h ─┬─ L × ( h += attn(rms(h)); h += mlp(rms(h)) )
    rope_cos/rope_sin [1,1,S,d/2]       │
    attention_mask [1,1,S,C+S]          └─ Slice(last position) ─ rms ─ Gemm(lm_headᵀ) ─► logits [1,1,V]
    past_key_i [1,KV,d,C], past_value_i [1,KV,C,d]  ──►  new_key_i [1,KV,d,S], new_value_i [1,KV,S,d]
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from tqdm import tqdm

from build_scripts.config import DecoderConfig
from build_scripts.graph.attention import StepShapes, decoder_attention
from build_scripts.graph.builder import GraphBuilder, WeightStore
from build_scripts.graph.blocks import BlockRecipe
from build_scripts.graph.linear import block_matmul, rms_norm
from build_scripts.graph.mlp import gated_silu_mlp
from build_scripts.weights.loaders import Weights
from models.contract import DYNAMIC, decoder_io

_ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "uint16": TensorProto.UINT16}


def build_decoder_graph(name: str, store: WeightStore, w: Weights, cfg: DecoderConfig, seq: int,
                        context: int, progress: bool = False, blocks: BlockRecipe | None = None) -> onnx.ModelProto:
    """`blocks`: the CPU target's block recipe (linear layers and LM head as MatMulNBits)."""
    dynamic = blocks is not None  # the CPU target reads only the filled cache prefix (see contract.py)
    io = decoder_io(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.vocab, seq, context, dynamic_past=dynamic)
    b = GraphBuilder(name, store, blocks)
    symbols = {"attention_mask": "past_and_new"}
    inp = {t.name: b.input(t.name, _ELEM[t.dtype], [symbols.get(t.name, "past") if n == DYNAMIC else n for n in t.shape])
           for t in io.inputs}
    shapes = StepShapes(seq=seq, context=context, dynamic_past=dynamic)

    if blocks is None:
        h = b.node("Gather", [b.weight("embed", lambda: w["embed"]), inp["input_ids"]], axis=0, name="embed")
    else:  # one row per token is read: float16 halves the table for free
        table = b.weight("embed.f16", lambda: w["embed"].astype(np.float16))
        h = b.node("Cast", [b.node("Gather", [table, inp["input_ids"]], axis=0, name="embed")], to=TensorProto.FLOAT)
    cos, sin = inp["rope_cos"], inp["rope_sin"]
    if blocks is not None:  # the fused rotary kernel reads its tables as [S, d/2]
        cos, sin = (b.node("Reshape", [t, b.ints(seq, cfg.head_dim // 2)], name=f"{t}_2d") for t in (cos, sin))
    mask = inp["attention_mask"]
    if cfg.kv_groups > 1:
        # rows of the folded GQA scores are (group, position): repeat the mask once per group
        mask = b.node("Concat", [mask] * cfg.kv_groups, axis=2, name="mask_per_group")

    for i in tqdm(range(cfg.n_layers), desc=f"graph {name}", unit="layer", disable=not progress, leave=False):
        with b.scope(f"layers.{i}"):
            with b.scope("attn"):
                a, new_k, new_v = decoder_attention(
                    b, rms_norm(b, h, w, f"layers.{i}.attn_norm", cfg.rms_eps), w, cfg, i, shapes,
                    cos, sin, mask, inp[f"past_key_{i}"], inp[f"past_value_{i}"])
                h = b.node("Add", [h, a], name="residual")
            with b.scope("mlp"):
                m = gated_silu_mlp(b, rms_norm(b, h, w, f"layers.{i}.mlp_norm", cfg.rms_eps), w, f"layers.{i}")
                h = b.node("Add", [h, m], name="residual")
        b.output(new_k, f"new_key_{i}", TensorProto.FLOAT, io.output(f"new_key_{i}").shape)
        b.output(new_v, f"new_value_{i}", TensorProto.FLOAT, io.output(f"new_value_{i}").shape)

    with b.scope("head"):
        # only the last position's logits: the LM head dominates the cost otherwise
        if seq > 1:
            h = b.node("Slice", [h, b.ints(seq - 1), b.ints(seq), b.ints(1)], name="last_position")
        h = b.node("Reshape", [rms_norm(b, h, w, "norm", cfg.rms_eps), b.ints(1, cfg.hidden)])
        head = "embed" if cfg.tied_embeddings else "lm_head"
        if blocks is None:
            logits = b.node("Gemm", [h, b.weight(head, lambda: w[head])], transB=1, name="lm_head")
        else:
            logits = block_matmul(b, h, [(head, 1.0)])
        logits = b.node("Reshape", [logits, b.ints(1, 1, cfg.vocab)])
    # logits go first among the outputs, as readers expect
    b.output(logits, "logits", TensorProto.FLOAT, io.output("logits").shape)
    b.outputs.insert(0, b.outputs.pop())
    return b.model(doc=f"hexrag {cfg.arch} decoder, S={seq}, C={context}")
