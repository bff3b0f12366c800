"""Normalized model configs: every loader (GGUF, Hugging Face) produces one of these, once.

They are the manifest's own architecture records (models/manifest.py), so what a build records is
exactly what it built from; the derived fields are properties so they cannot drift from the
fields they come from.
"""

from __future__ import annotations

from pydantic import ConfigDict

from models.manifest import DecoderArchitecture, EncoderArchitecture


class DecoderConfig(DecoderArchitecture):
    """A Llama/Qwen2-style decoder: RMSNorm, rotary attention with GQA, SiLU-gated MLP."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def kv_groups(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim


class BertConfig(EncoderArchitecture):
    """A BERT encoder (post-LayerNorm, GELU) used as a sentence embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads
