"""BERT sentence-embedder graph at a static [B, L] shape with pooling inside the graph.

    input_ids [B,L] ─Gather(word)+pos/type─LN─► L × post-LN encoder layer ─┐
    attention_mask [B,L] ─► additive mask (bounded) ──────────────────────┤
                             mean over real tokens ◄──────────────────────┘ ─► L2 normalise ─► embeddings [B,H]
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from build_scripts.config import BertConfig
from build_scripts.graph.attention import bert_attention
from build_scripts.graph.builder import GraphBuilder, WeightStore
from build_scripts.graph.linear import layer_norm
from build_scripts.graph.mlp import gelu_mlp
from build_scripts.weights.loaders import Weights
from models.contract import MASK_VALUE, embedder_io


def build_bert_graph(name: str, store: WeightStore, w: Weights, cfg: BertConfig, batch: int,
                     seq: int) -> onnx.ModelProto:
    io = embedder_io(batch, seq, cfg.hidden)
    b = GraphBuilder(name, store)
    ids = b.input("input_ids", TensorProto.INT32, io.input("input_ids").shape)
    mask_in = b.input("attention_mask", TensorProto.INT32, io.input("attention_mask").shape)

    with b.scope("embed"):
        # single-segment input: position and token-type-0 embeddings fold into one constant, stored
        # at the full [B,L,H]: QNN HTP (2.51) computes Add(x[B,L,H], c[L,H]) followed by LayerNorm
        # wrongly for batch rows > 0 (measured on the simulator, every target)
        pos_type = b.weight(f"pos_type_{batch}x{seq}", lambda: np.ascontiguousarray(np.broadcast_to(
            w["pos_embed"][:seq] + w["type_embed"][0], (batch, seq, cfg.hidden))))
        h = b.node("Add", [b.node("Gather", [b.weight("word_embed", lambda: w["word_embed"]), ids], axis=0), pos_type])
        h = layer_norm(b, h, w, "embed_norm", cfg.ln_eps)
        valid = b.node("Cast", [mask_in], to=TensorProto.FLOAT)  # [B,L], 1 for real tokens
        additive = b.node("Mul", [b.node("Sub", [b.const(1.0), valid]), b.const(MASK_VALUE)])
        additive = b.node("Reshape", [additive, b.ints(batch, 1, 1, seq)])

    for i in range(cfg.n_layers):
        with b.scope(f"layers.{i}"):
            with b.scope("attn"):
                a = bert_attention(b, h, w, cfg, i, batch, seq, additive)
                h = layer_norm(b, b.node("Add", [h, a]), w, f"layers.{i}.attn_norm", cfg.ln_eps)
            with b.scope("mlp"):
                m = gelu_mlp(b, h, w, f"layers.{i}")
                h = layer_norm(b, b.node("Add", [h, m]), w, f"layers.{i}.mlp_norm", cfg.ln_eps)

    with b.scope("pool"):
        weights = b.node("Reshape", [valid, b.ints(batch, seq, 1)])
        summed = b.node("ReduceSum", [b.node("Mul", [h, weights]), b.ints(1)], keepdims=0)
        count = b.node("Max", [b.node("ReduceSum", [weights, b.ints(1)], keepdims=0), b.const(1e-9)])
        mean = b.node("Div", [summed, count])
        sq = b.node("ReduceSum", [b.node("Mul", [mean, mean]), b.ints(1)], keepdims=1)
        norm = b.node("Sqrt", [b.node("Max", [sq, b.const(np.float32(1e-24))])])
        out = b.node("Div", [mean, norm], name="l2_normalize")
    b.output(out, "embeddings", TensorProto.FLOAT, io.output("embeddings").shape)
    return b.model(doc=f"hexrag bert embedder, B={batch}, L={seq}")
