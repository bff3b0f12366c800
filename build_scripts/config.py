"""Normalized model configs: every loader (GGUF, Hugging Face) produces one of these, once.

Derived fields are properties so they cannot drift from the fields they come from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DecoderConfig:
    """A Llama/Qwen2-style decoder: RMSNorm, rotary attention with GQA, SiLU-gated MLP."""

    arch: str  # "llama" | "qwen2"
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    rms_eps: float
    tied_embeddings: bool
    qkv_bias: bool
    max_positions: int

    @property
    def kv_groups(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BertConfig:
    """A BERT encoder (post-LayerNorm, GELU) used as a sentence embedder."""

    arch: str  # "bert"
    n_layers: int
    hidden: int
    n_heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    ln_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)
