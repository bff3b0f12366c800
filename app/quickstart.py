"""The one-command start: make sure the embedded default models are built, reusing earlier builds."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from build_scripts.build import build_embedder, build_llm
from knowledge import KnowledgeBase
from models.contract import contract_mismatch
from models.manifest import ManifestError, load_manifest

log = logging.getLogger(__name__)

DEFAULT_LLM = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"


def _ready(model_dir: Path, quant: str = "none") -> bool:
    try:
        m = load_manifest(model_dir)  # verifies every file's sha256
    except ManifestError as e:
        if model_dir.exists():
            log.info("rebuilding %s: %s", model_dir, e)
        return False
    if m.quantization.get("recipe", "none") != quant:
        log.info("rebuilding %s: it is a %s build, %s is wanted", model_dir, m.quantization.get("recipe"), quant)
        return False
    stale = contract_mismatch(m) if m.kind == "llm" else None
    if stale:
        log.info("rebuilding %s: %s", model_dir, stale)
        return False
    return True


def ensure_default_models(models_dir: Path, backend: str = "cpu") -> tuple[Path, Path]:
    """The CPU backend gets the int4 CPU target (GGUF blocks kept exactly, the fast build); HTP
    gets the float graphs (fp16 on the NPU) in a directory of their own."""
    quant, context = ("int4", 2048) if backend == "cpu" else ("none", 1024)
    llm_dir = models_dir / (DEFAULT_LLM if backend == "cpu" else f"{DEFAULT_LLM}-float")
    embedder_dir = models_dir / DEFAULT_EMBEDDER
    if not _ready(llm_dir, quant):
        log.info("building %s (%s, context %d, prefill 128 and 32) ...", DEFAULT_LLM, quant, context)
        build_llm(DEFAULT_LLM, llm_dir, context=context, prefill=(128, 32), quant=quant)
    if not _ready(embedder_dir):
        log.info("building %s (batch 8, 128 tokens) ...", DEFAULT_EMBEDDER)
        build_embedder(DEFAULT_EMBEDDER, embedder_dir, batch=8, seq=128)
    return llm_dir, embedder_dir


SAMPLES = Path(str(resources.files("knowledge") / "samples"))


def ensure_sample_kb(kb: KnowledgeBase) -> None:
    """Ingest the sample in-car FAQ and manual; unchanged files are skipped on later starts."""
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".jsonl", ".md") and p.name != "README.md"
                   and p.name != "eval_questions.jsonl")
    report = kb.ingest(files, progress=True, prune=False)
    log.info("knowledge base %s: %d added, %d unchanged", kb.dir, len(report.added), len(report.unchanged))
