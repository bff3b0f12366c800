"""Independent numpy reference forward passes, read straight from the weight files.

Nothing here imports the project (build_scripts, runtime, models, app, knowledge): the point of
this module is to be a second, textbook implementation that the ONNX graphs built by the project
can be checked against. Everything is computed in float64 without a KV cache, so it is slow but
unambiguous.

Two weight sources for decoders, with deliberately different conventions:

* GGUF (llama.cpp layout). For arch ``llama`` llama.cpp applies RoPE in mode NORM, rotating
  ADJACENT pairs (x[2i], x[2i+1]); convert_hf_to_gguf.py permutes the Q/K rows so that this
  equals HF's rotate_half on the original weights. For ``qwen2`` llama.cpp uses mode NEOX,
  rotating (x[i], x[i + d/2]) and the rows are stored unpermuted.
* HF (config.json + safetensors): rotate_half RoPE, i.e. the NEOX pairing.

If both readers agree on the same model written both ways, the permutation and the two rope
conventions are understood correctly.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------------------
# Small numerical building blocks
# ----------------------------------------------------------------------------------------------


_F64: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(W) -> (W, float64 W^T), converted once


def _f64_t(w: np.ndarray) -> np.ndarray:
    hit = _F64.get(id(w))
    if hit is None or hit[0] is not w:  # the stored W keeps its id from being reused
        hit = _F64[id(w)] = (w, np.ascontiguousarray(w.T, dtype=np.float64))
    return hit[1]


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """y = x @ W^T (+ b), with W stored [out, in] as both PyTorch and GGUF (dims reversed) do."""
    y = x @ _f64_t(w)
    return y if b is None else y + b


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased variance, as torch LayerNorm
    return (x - mu) / np.sqrt(var + eps) * w + b


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact GELU (HF "gelu"), not the tanh approximation."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _rope(x: np.ndarray, positions: np.ndarray, base: float, n_rot: int, pairing: str) -> np.ndarray:
    """Rotate the first n_rot dims of x [heads, T, head_dim] by position.

    Pair i (0 <= i < n_rot/2) is rotated by angle pos * base^(-2i/n_rot). Which two elements form
    pair i is the only difference between the conventions:
      "adjacent": (x[2i], x[2i+1])          -- llama.cpp ROPE_TYPE_NORM (GGUF llama)
      "halves":   (x[i],  x[i + n_rot/2])   -- llama.cpp ROPE_TYPE_NEOX, HF rotate_half
    """
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    angle = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, half]
    cos, sin = np.cos(angle), np.sin(angle)
    out = x.copy()
    if pairing == "adjacent":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    elif pairing == "halves":
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        raise ValueError(f"unknown rope pairing {pairing!r}")
    return out


# ----------------------------------------------------------------------------------------------
# Weight file readers
# ----------------------------------------------------------------------------------------------

_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def _read_safetensors_file(path: Path) -> dict[str, np.ndarray]:
    """Load one .safetensors file; BF16 (which numpy lacks) is widened to float32 by hand."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    if not any(isinstance(v, dict) and v.get("dtype") == "BF16" for v in header.values()):
        from safetensors.numpy import load

        return load(raw)
    body = memoryview(raw)[8 + n :]  # the format is trivial: u64 header size, JSON header, data
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        if info["dtype"] == "BF16":  # bf16 is the top half of a float32
            arr = (np.frombuffer(body[lo:hi], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(body[lo:hi], dtype=_ST_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def load_hf_weights(model_dir: str | Path) -> dict[str, np.ndarray]:
    """All tensors of an HF directory: model.safetensors or a sharded set with an index."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights: dict[str, np.ndarray] = {}
    for f in files:
        weights.update(_read_safetensors_file(model_dir / f))
    return weights


def _gguf_metadata(reader) -> dict:
    return {name: field.contents() for name, field in reader.fields.items()}


def _gguf_tensors(reader) -> dict[str, np.ndarray]:
    """Dequantize every tensor to float32, numpy shape = GGUF dims reversed ([out, in])."""
    from gguf.quants import dequantize

    out = {}
    for t in reader.tensors:
        arr = dequantize(t.data, t.tensor_type)
        out[t.name] = np.asarray(arr, dtype=np.float32).reshape(tuple(int(d) for d in reversed(t.shape)))
    return out


# ----------------------------------------------------------------------------------------------
# Decoder (Llama / Qwen2)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderConfig:
    n_layer: int
    hidden: int
    n_head: int
    n_kv_head: int
    head_dim: int
    ffn: int
    vocab: int
    rope_base: float
    rms_eps: float
    n_rot: int  # rotary dims per head (== head_dim for these models)
    rope_pairing: str  # "adjacent" (GGUF llama) or "halves" (GGUF qwen2, all HF)


class RefDecoder:
    """Pre-norm decoder: RMSNorm -> GQA attention with RoPE -> RMSNorm -> SiLU-gated MLP.

    `layers` holds per-layer dicts with keys attn_norm, wq, bq, wk, bk, wv, bv, wo, ffn_norm,
    w_gate, w_up, w_down (biases may be None); all linear weights are [out, in].
    """

    def __init__(self, cfg: DecoderConfig, embed: np.ndarray, layers: list[dict],
                 final_norm: np.ndarray, lm_head: np.ndarray):
        self.cfg, self.embed, self.layers = cfg, embed, layers
        self.final_norm, self.lm_head = final_norm, lm_head
        self.metadata: dict = {}  # GGUF key/values or HF config, for convenience

    # -- readers ---------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | Path) -> "RefDecoder":
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        meta = _gguf_metadata(reader)
        arch = meta["general.architecture"]
        if arch not in ("llama", "qwen2"):
            raise NotImplementedError(f"reference decoder supports llama/qwen2 GGUF, not {arch!r}")
        hp = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
        hidden, n_head = int(hp("embedding_length")), int(hp("attention.head_count"))
        head_dim = int(hp("attention.key_length", hidden // n_head))
        w = _gguf_tensors(reader)
        cfg = DecoderConfig(
            n_layer=int(hp("block_count")), hidden=hidden, n_head=n_head,
            n_kv_head=int(hp("attention.head_count_kv", n_head)), head_dim=head_dim,
            ffn=int(hp("feed_forward_length")), vocab=w["token_embd.weight"].shape[0],
            rope_base=float(hp("rope.freq_base", 10000.0)),
            rms_eps=float(hp("attention.layer_norm_rms_epsilon")),
            n_rot=int(hp("rope.dimension_count", head_dim)),
            # llama.cpp: LLM_ARCH_LLAMA -> LLAMA_ROPE_TYPE_NORM, LLM_ARCH_QWEN2 -> NEOX
            rope_pairing="adjacent" if arch == "llama" else "halves",
        )
        layers = []
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            layers.append(dict(
                attn_norm=w[p + "attn_norm.weight"],
                wq=w[p + "attn_q.weight"], bq=w.get(p + "attn_q.bias"),
                wk=w[p + "attn_k.weight"], bk=w.get(p + "attn_k.bias"),
                wv=w[p + "attn_v.weight"], bv=w.get(p + "attn_v.bias"),
                wo=w[p + "attn_output.weight"],
                ffn_norm=w[p + "ffn_norm.weight"],
                w_gate=w[p + "ffn_gate.weight"], w_up=w[p + "ffn_up.weight"],
                w_down=w[p + "ffn_down.weight"],
            ))
        embed = w["token_embd.weight"]
        model = cls(cfg, embed, layers, w["output_norm.weight"], w.get("output.weight", embed))
        model.metadata = meta
        return model

    @classmethod
    def from_hf(cls, model_dir: str | Path) -> "RefDecoder":
        model_dir = Path(model_dir)
        conf = json.loads((model_dir / "config.json").read_text())
        if conf.get("rope_scaling"):
            raise NotImplementedError("rope_scaling is not implemented in the reference")
        w = load_hf_weights(model_dir)
        hidden, n_head = conf["hidden_size"], conf["num_attention_heads"]
        head_dim = conf.get("head_dim") or hidden // n_head
        embed = w["model.embed_tokens.weight"]
        cfg = DecoderConfig(
            n_layer=conf["num_hidden_layers"], hidden=hidden, n_head=n_head,
            n_kv_head=conf.get("num_key_value_heads", n_head), head_dim=head_dim,
            ffn=conf["intermediate_size"], vocab=embed.shape[0],
            rope_base=float(conf.get("rope_theta", 10000.0)), rms_eps=float(conf["rms_norm_eps"]),
            n_rot=head_dim, rope_pairing="halves",  # HF rotate_half
        )
        layers = []
        for i in range(cfg.n_layer):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            layers.append(dict(
                attn_norm=w[p + "input_layernorm.weight"],
                wq=w[a + "q_proj.weight"], bq=w.get(a + "q_proj.bias"),
                wk=w[a + "k_proj.weight"], bk=w.get(a + "k_proj.bias"),
                wv=w[a + "v_proj.weight"], bv=w.get(a + "v_proj.bias"),
                wo=w[a + "o_proj.weight"],
                ffn_norm=w[p + "post_attention_layernorm.weight"],
                w_gate=w[p + "mlp.gate_proj.weight"], w_up=w[p + "mlp.up_proj.weight"],
                w_down=w[p + "mlp.down_proj.weight"],
            ))
        lm_head = embed if conf.get("tie_word_embeddings") else w.get("lm_head.weight", embed)
        model = cls(cfg, embed, layers, w["model.norm.weight"], lm_head)
        model.metadata = conf
        return model

    # -- forward ---------------------------------------------------------------------------

    def _attention(self, x: np.ndarray, L: dict, positions: np.ndarray) -> np.ndarray:
        c = self.cfg
        T = x.shape[0]
        # project and split into heads: [heads, T, head_dim]
        q = _linear(x, L["wq"], L["bq"]).reshape(T, c.n_head, c.head_dim).transpose(1, 0, 2)
        k = _linear(x, L["wk"], L["bk"]).reshape(T, c.n_kv_head, c.head_dim).transpose(1, 0, 2)
        v = _linear(x, L["wv"], L["bv"]).reshape(T, c.n_kv_head, c.head_dim).transpose(1, 0, 2)
        q = _rope(q, positions, c.rope_base, c.n_rot, c.rope_pairing)
        k = _rope(k, positions, c.rope_base, c.n_rot, c.rope_pairing)
        # GQA: query head h reads kv head h // group (HF repeat_kv == ggml broadcast)
        group = c.n_head // c.n_kv_head
        k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(c.head_dim)  # [heads, T, T]
        causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # key j > query i is the future
        scores = np.where(causal[None], -np.inf, scores)
        ctx = _softmax(scores) @ v  # [heads, T, head_dim]
        return _linear(ctx.transpose(1, 0, 2).reshape(T, c.n_head * c.head_dim), L["wo"])

    def hidden_states(self, token_ids: list[int]) -> np.ndarray:
        """Final-normed hidden states [T, hidden] for the whole sequence (positions 0..T-1)."""
        c = self.cfg
        ids = np.asarray(token_ids, dtype=np.int64)
        positions = np.arange(len(ids))
        x = self.embed[ids].astype(np.float64)
        for L in self.layers:
            x = x + self._attention(_rms_norm(x, L["attn_norm"], c.rms_eps), L, positions)
            h = _rms_norm(x, L["ffn_norm"], c.rms_eps)
            x = x + _linear(_silu(_linear(h, L["w_gate"])) * _linear(h, L["w_up"]), L["w_down"])
        return _rms_norm(x, self.final_norm, c.rms_eps)

    def logits(self, token_ids: list[int]) -> np.ndarray:
        """Logits [T, vocab] (float64), causal, recomputed from scratch (no cache)."""
        return _linear(self.hidden_states(token_ids), self.lm_head)

    def greedy(self, token_ids: list[int], n_new: int, stop_ids: tuple[int, ...] = ()) -> list[int]:
        """Greedy continuation (new ids only); stops early after emitting a stop id."""
        ids, new = list(token_ids), []
        for _ in range(n_new):
            nxt = int(np.argmax(_linear(self.hidden_states(ids)[-1:], self.lm_head)[0]))
            ids.append(nxt)
            new.append(nxt)
            if nxt in stop_ids:
                break
        return new


# ----------------------------------------------------------------------------------------------
# GGUF tokenizer (built independently from tokenizer.ggml.* with the `tokenizers` library)
# ----------------------------------------------------------------------------------------------


def tokenizer_from_gguf(path_or_metadata) -> "tokenizers.Tokenizer":  # noqa: F821
    """A byte-level BPE `tokenizers.Tokenizer` from a GGUF with tokenizer.ggml.model == "gpt2".

    Control tokens (token_type 3) become special tokens, so "<|im_start|>" in text is one id.
    Pre-tokenization is GPT-2's regex; for pre "smollm" (and "qwen2") digits are split one by one
    first, matching llama.cpp's pre-tokenizer regex lists for those types.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if isinstance(path_or_metadata, dict):
        meta = path_or_metadata
    else:
        from gguf import GGUFReader

        meta = _gguf_metadata(GGUFReader(str(path_or_metadata)))
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise NotImplementedError(f"only gpt2-style BPE GGUF tokenizers, got {meta.get('tokenizer.ggml.model')!r}")
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if meta.get("tokenizer.ggml.pre") in ("smollm", "qwen2"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


# ----------------------------------------------------------------------------------------------
# BERT sentence embedder (sentence-transformers all-MiniLM-L6-v2 semantics)
# ----------------------------------------------------------------------------------------------


class RefBert:
    """Post-norm BERT encoder + masked mean pooling + L2 normalisation."""

    def __init__(self, conf: dict, weights: dict[str, np.ndarray]):
        self.conf = conf
        self.w = weights
        self.n_layer = conf["num_hidden_layers"]
        self.n_head = conf["num_attention_heads"]
        self.eps = float(conf.get("layer_norm_eps", 1e-12))
        if conf.get("hidden_act", "gelu") != "gelu":
            raise NotImplementedError(f"hidden_act {conf.get('hidden_act')!r}")

    @classmethod
    def from_hf(cls, model_dir: str | Path) -> "RefBert":
        model_dir = Path(model_dir)
        conf = json.loads((model_dir / "config.json").read_text())
        raw = load_hf_weights(model_dir)
        # BertForX checkpoints prefix everything with "bert."; BertModel ones do not
        w = {k.removeprefix("bert."): v for k, v in raw.items()}
        return cls(conf, w)

    def _lin(self, x: np.ndarray, name: str) -> np.ndarray:
        return _linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def token_states(self, batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Last hidden states [N, T, hidden] of the right-padded batch, and the mask [N, T]."""
        N, T = len(batch), max(len(s) for s in batch)
        ids = np.zeros((N, T), dtype=np.int64)
        mask = np.zeros((N, T), dtype=bool)
        for n, s in enumerate(batch):
            ids[n, : len(s)] = s
            mask[n, : len(s)] = True
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(T)][None]
             + w["embeddings.token_type_embeddings.weight"][0][None, None]).astype(np.float64)
        x = self._ln(x, "embeddings.LayerNorm")
        H, hd = self.n_head, x.shape[-1] // self.n_head
        # padded keys get -inf, so real tokens never attend to padding (pad rows are ignored later)
        key_bias = np.where(mask, 0.0, -np.inf)[:, None, None, :]  # [N, 1, 1, T]
        split = lambda t: t.reshape(N, T, H, hd).transpose(0, 2, 1, 3)  # noqa: E731
        for i in range(self.n_layer):
            p = f"encoder.layer.{i}."
            q = split(self._lin(x, p + "attention.self.query"))
            k = split(self._lin(x, p + "attention.self.key"))
            v = split(self._lin(x, p + "attention.self.value"))
            probs = _softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + key_bias)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(N, T, H * hd)
            x = self._ln(x + self._lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inter = _gelu_erf(self._lin(x, p + "intermediate.dense"))
            x = self._ln(x + self._lin(inter, p + "output.dense"), p + "output.LayerNorm")
        return x, mask

    def embed(self, batch: list[list[int]]) -> np.ndarray:
        """Unit-norm sentence vectors [N, hidden] from UNPADDED id lists ([CLS] ... [SEP])."""
        x, mask = self.token_states(batch)
        m = mask[..., None].astype(np.float64)
        pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)  # sentence-transformers clamps at 1e-9
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)  # F.normalize eps
