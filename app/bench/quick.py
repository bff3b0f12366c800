"""The models `hexrag eval --all --quick` builds for itself: a tiny random-weight llama (GGUF) and
BERT (Hugging Face layout) through the real builders, each also quantized w8a16 by the real
pipeline. No downloads; about half a minute on two cores.

The weight writers are build_scripts/tiny_models.py, which the test suite uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# a 128-slot cache holds a chat-templated in-car question plus an answer with the tiny byte-level
# tokenizer (the model's positions end there); the buckets are the test suite's
LLM_CONTEXT, LLM_PREFILL = 128, (16, 4)
BERT_BATCH, BERT_SEQ = 4, 32
CALIBRATION_SAMPLES = 16


@dataclass
class QuickModels:
    llm: Path
    llm_quantized: Path
    embedder: Path
    embedder_quantized: Path


def build_quick_models(root: Path) -> QuickModels:
    from build_scripts import tiny_models as tm
    from build_scripts.build import build_embedder, build_llm
    from build_scripts.quantize import quantize_model_dir

    root.mkdir(parents=True, exist_ok=True)
    tm.write_tiny_llama_gguf(root / "llama.gguf", seed=1, tied=True)
    tm.write_tiny_hf_bert(root / "bert_src", seed=5)
    out = QuickModels(root / "llama", root / "llama_w8a16", root / "bert", root / "bert_w8a16")
    build_llm(root / "llama.gguf", out.llm, context=LLM_CONTEXT, prefill=LLM_PREFILL, progress=False)
    build_embedder(root / "bert_src", out.embedder, batch=BERT_BATCH, seq=BERT_SEQ)
    # accuracy is measured afterwards by the report, the same way for quick and full mode
    for src, dest in ((out.llm, out.llm_quantized), (out.embedder, out.embedder_quantized)):
        quantize_model_dir(src, "w8a16", samples=CALIBRATION_SAMPLES, out=dest, progress=False, evaluate=False)
    return out
