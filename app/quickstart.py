"""The one-command start: make sure the embedded default models are built, reusing earlier builds."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from build_scripts.build import build_embedder, build_llm
from knowledge import KnowledgeBase
from models.manifest import ManifestError, load_manifest

log = logging.getLogger(__name__)

DEFAULT_LLM = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"


def _ready(model_dir: Path) -> bool:
    try:
        load_manifest(model_dir)  # verifies every file's sha256
        return True
    except ManifestError as e:
        if model_dir.exists():
            log.info("rebuilding %s: %s", model_dir, e)
        return False


def ensure_default_models(models_dir: Path) -> tuple[Path, Path]:
    llm_dir, embedder_dir = models_dir / DEFAULT_LLM, models_dir / DEFAULT_EMBEDDER
    if not _ready(llm_dir):
        log.info("building %s (context 1024, prefill 128 and 32) ...", DEFAULT_LLM)
        build_llm(DEFAULT_LLM, llm_dir, context=1024, prefill=(128, 32))
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
