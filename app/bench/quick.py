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
    from build_scripts.plan import BuildPlan, EmbedderShape, FloatGraphs, HtpPtq, LLMShape, build_model

    root.mkdir(parents=True, exist_ok=True)
    tm.write_tiny_llama_gguf(root / "llama.gguf", seed=1, tied=True)
    tm.write_tiny_hf_bert(root / "bert_src", seed=5)
    out = QuickModels(root / "llama", root / "llama_w8a16", root / "bert", root / "bert_w8a16")
    # accuracy is measured afterwards by the report, the same way for quick and full mode
    ptq = HtpPtq(recipe="w8a16", samples=CALIBRATION_SAMPLES, eval_samples=0)
    llm = LLMShape(context=LLM_CONTEXT, prefill=LLM_PREFILL)
    for dest, quant in ((out.llm, FloatGraphs()), (out.llm_quantized, ptq)):
        build_model(BuildPlan(weights=str(root / "llama.gguf"), out=dest, shape=llm, quant=quant, progress=False))
    embedder = EmbedderShape(batch=BERT_BATCH, seq=BERT_SEQ)
    for dest, quant in ((out.embedder, FloatGraphs()), (out.embedder_quantized, ptq)):
        build_model(BuildPlan(weights=str(root / "bert_src"), out=dest, shape=embedder, quant=quant, progress=False))
    return out
