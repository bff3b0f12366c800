"""The one-command start: make sure the embedded default models are built, reusing earlier builds."""

from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path

from build_scripts.build import build_embedder, build_llm
from knowledge import KnowledgeBase
from models.contract import contract_mismatch
from models.manifest import ManifestError, load_manifest

log = logging.getLogger(__name__)

DEFAULT_LLM = "qwen2.5-coder-1.5b-instruct"  # the mission's model class: answers in English and Chinese
TINY_LLM = "smollm2-135m-instruct"  # CI, low-memory machines and the HTP simulator
DEFAULT_EMBEDDER = "all-minilm-l6-v2"
# the 1.5B int4 CPU build peaks at 2.2 GB RSS (docs/benchmarks.md) and its build reads the 1.1 GB
# GGUF: below this much memory the tiny preset is the one that runs
MIN_MEMORY_FOR_DEFAULT = 6 * 1024**3


def total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def choose_llm(backend: str, tiny: bool) -> tuple[str, str]:
    """The packaged LLM to use, and why."""
    if tiny:
        return TINY_LLM, "the tiny preset was asked for"
    if backend != "cpu":
        return TINY_LLM, "the HTP simulator on this host runs only tiny models"
    memory = total_memory()
    if memory < MIN_MEMORY_FOR_DEFAULT:
        return TINY_LLM, f"{memory / 1024**3:.1f} GB of memory is less than the 1.5B model needs (6 GB)"
    return DEFAULT_LLM, f"{memory / 1024**3:.0f} GB of memory"


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


def ensure_default_models(models_dir: Path, backend: str = "cpu", llm: str = DEFAULT_LLM) -> tuple[Path, Path]:
    """The CPU backend gets the int4 CPU target (GGUF blocks kept exactly, the fast build); HTP
    gets the float graphs (fp16 on the NPU) in a directory of their own."""
    quant, context = ("int4", 2048) if backend == "cpu" else ("none", 1024)
    llm_dir = models_dir / (llm if backend == "cpu" else f"{llm}-float")
    embedder_dir = models_dir / DEFAULT_EMBEDDER
    if not _ready(llm_dir, quant):
        log.info("building %s (%s, context %d, prefill 128 and 32) ...", llm, quant, context)
        build_llm(llm, llm_dir, context=context, prefill=(128, 32), quant=quant)
    if not _ready(embedder_dir):
        log.info("building %s (batch 8, 128 tokens) ...", DEFAULT_EMBEDDER)
        build_embedder(DEFAULT_EMBEDDER, embedder_dir, batch=8, seq=128)
    return llm_dir, embedder_dir


SAMPLES = Path(str(resources.files("knowledge") / "samples"))


def ensure_sample_kb(kb: KnowledgeBase) -> None:
    """Ingest the sample in-car FAQ and manual; unchanged files are skipped on later starts."""
    # the question files beside the KB are its evaluations, not knowledge
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".jsonl", ".md") and p.name != "README.md"
                   and "questions" not in p.name)
    report = kb.ingest(files, progress=True, prune=False)
    # a KB filled from another checkout or install holds the same samples under another path: every
    # passage would be retrieved (and cited) twice
    current, names = {str(p.resolve()) for p in files}, {p.name for p in files}
    for doc in kb.list_documents():
        src = Path(doc.source)
        if src.name in names and src.parent.parts[-2:] == ("knowledge", "samples") and doc.source not in current:
            kb.delete(doc.source)
            log.info("knowledge base %s: removed the sample copy %s", kb.dir, doc.source)
    log.info("knowledge base %s: %d added, %d unchanged", kb.dir, len(report.added), len(report.unchanged))
