"""A GenAI model folder for `hexrag bench llm --vs genai`, from the weights a hexrag model was built from.

    hexrag model dir ─► its source weights (GGUF / HF), dequantized by hexrag's own loader
                     ─► a Hugging Face folder (config.json, model.safetensors, tokenizer files)
                     ─► onnxruntime_genai.models.builder -p int4 -e cpu, run by ANOTHER python

GenAI's builder imports torch and transformers. hexrag never depends on either, so the builder
runs in a separate virtual environment (`--python /tmp/genai-venv/bin/python`; docs/benchmarks.md
says how that venv was made); only the Hugging Face folder is written from here.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from app.bench.errors import BenchError

_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def _hf_config(cfg, tok, context: int) -> dict:
    return {
        "architectures": [_ARCHITECTURES[cfg.arch]], "model_type": cfg.arch, "hidden_act": "silu",
        "hidden_size": cfg.hidden, "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_eps,
        "tie_word_embeddings": cfg.tied_embeddings, "attention_bias": cfg.qkv_bias,
        "max_position_embeddings": max(cfg.max_positions, context), "torch_dtype": "float32",
        "bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id,
    }


def write_hf_folder(model_dir: Path, out: Path) -> Path:
    """The model's source weights as a float32 Hugging Face folder (what GenAI's builder reads)."""
    from safetensors.numpy import save_file

    from build_scripts.weights.loaders import HF_DECODER, load_weights
    from models.manifest import load_manifest

    m = load_manifest(model_dir, verify=False)
    if m.kind != "llm":
        raise BenchError(f"{model_dir} holds an {m.kind} model, not an LLM")
    loaded = load_weights(m.source.path)
    cfg = loaded.config
    names = {canon.format(i=i): hf.format(i=i) for canon, hf in HF_DECODER.items()
             for i in (range(cfg.n_layers) if "{i}" in canon else [0])}
    out.mkdir(parents=True, exist_ok=True)
    save_file({names[c]: loaded.weights[c] for c in loaded.weights}, str(out / "model.safetensors"))
    tok = m.tokenizer
    (out / "config.json").write_text(json.dumps(_hf_config(cfg, tok, m.context), indent=1))
    (out / "tokenizer.json").write_bytes((model_dir / tok.file).read_bytes())
    template = (model_dir / tok.chat_template).read_text() if tok.chat_template else None
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tok.bos_token, "eos_token": tok.eos_token,
        "add_bos_token": tok.add_bos, "add_eos_token": tok.add_eos, "model_max_length": m.context,
        "chat_template": template}, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id}))
    return out


def build_genai_model(model_dir: Path, out: Path, python: Path, precision: str = "int4") -> Path:
    """Run GenAI's model builder (CPU EP) in `python`'s environment over the exported folder."""
    if not Path(python).is_file():
        raise BenchError(f"no python at {python}: make a venv with torch, transformers and onnxruntime-genai "
                         "(docs/benchmarks.md) and pass its python with --python")
    with tempfile.TemporaryDirectory(prefix="hexrag-genai-") as tmp:
        hf = write_hf_folder(model_dir, Path(tmp) / "hf")
        cmd = [str(python), "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
               "-p", precision, "-e", "cpu", "-c", str(Path(tmp) / "cache")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (out / "genai_config.json").is_file():
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        raise BenchError(f"GenAI's model builder failed: {lines[-1] if lines else proc.returncode}")
    return out
