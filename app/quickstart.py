"""The one-command start: make sure the embedded default models are built, reusing earlier builds."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from build_scripts.graph.blocks import kernel_types_on_matmulnbits
from build_scripts.plan import BuildPlan, EmbedderShape, LLMShape, build_model, parse_quant
from knowledge import AnswerProfile, KnowledgeBase
from knowledge.cjk import cjk_share
from knowledge.loaders import is_supported, load_document
from knowledge.sample_kb import sample_kb
from models import home
from models.contract import contract_mismatch
from models.manifest import ManifestError, load_manifest
from runtime import kquant

log = logging.getLogger(__name__)

# the 1.5B: the mission's model class, answers in English and Chinese; the tiny preset: CI,
# low-memory machines and the HTP simulator
DEFAULT_LLM, TINY_LLM = home.DEFAULT_LLMS
DEFAULT_EMBEDDER, MULTILINGUAL_EMBEDDER = home.DEFAULT_EMBEDDERS
# the share of a KB's words in Chinese from which quickstart builds the multilingual embedder as the
# only one. On the sample KB's questions (docs/benchmarks.md) all-MiniLM-L6-v2 alone (its vectors for
# English, BM25 alone for Chinese) had R@1 0.778 English / 0.696 Chinese, multilingual-e5-small 0.716 /
# 0.870: by retrieval alone they break even near a quarter of the questions in Chinese. Below it, a KB
# holding any Chinese (SECOND_SHARE) keeps MiniLM for what it reads and gets e5 as its second embedder,
# for the questions MiniLM cannot read: R@1 0.889 English / 0.870 Chinese on the same questions. The
# answer layer's cosine thresholds are calibrated on MiniLM's scale (e5's cosines sit at 0.7-0.9).
MULTILINGUAL_SHARE = 0.5
SECOND_SHARE = 0.01
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


def choose_embedders(files: list[Path]) -> tuple[str, str | None, str]:
    """The packaged embedder for a KB of these documents, its second embedder (None: none), and why."""
    share = documents_cjk_share(files)
    if share >= MULTILINGUAL_SHARE:
        return MULTILINGUAL_EMBEDDER, None, f"{share:.0%} of the documents' words are Chinese"
    if share >= SECOND_SHARE:
        return DEFAULT_EMBEDDER, MULTILINGUAL_EMBEDDER, (
            f"{share:.0%} of the documents' words are Chinese: {MULTILINGUAL_EMBEDDER} reads the questions "
            f"{DEFAULT_EMBEDDER} cannot")
    return DEFAULT_EMBEDDER, None, f"{share:.0%} of the documents' words are Chinese"


def documents_cjk_share(files: list[Path]) -> float:
    return cjk_share("\n".join(load_document(f).text for f in files if is_supported(f)))


def _ready(model_dir: Path, quant: str = "none") -> bool:
    try:
        m = load_manifest(model_dir)  # verifies every file's sha256
    except ManifestError as e:
        if model_dir.exists():
            log.info("not reusing %s: %s", model_dir, e)
        return False
    if m.quantization.recipe != quant:
        log.info("not reusing %s: it is a %s build, %s is wanted", model_dir, m.quantization.recipe, quant)
        return False
    stale = contract_mismatch(m) if m.kind == "llm" else None
    if stale:
        log.info("not reusing %s: %s", model_dir, stale)
        return False
    blocks = m.quantization.blocks
    if quant == "int4" and kquant.preferred() and blocks is not None and (
            not blocks.kquant_kernels or kernel_types_on_matmulnbits(blocks.weights)):
        # built before the kernels were here, or before they read all of its block types
        log.info("not reusing %s: built without hexrag's K-quant kernels for its blocks, which are here now", model_dir)
        return False
    return True


def _ensure(name: str, models_dir: Path | None, quant: str, build: Callable[[Path], None]) -> Path:
    """An existing build of `name` that fits, else a new one: in `models_dir`, or by default in the
    hexrag home (where an earlier version's build in a checkout's ./models is reused too)."""
    found = models_dir / name if models_dir is not None else home.model_dir(name)
    if _ready(found, quant):
        return found
    out = (models_dir if models_dir is not None else home.models_dir()) / name
    build(out)
    return out


def ensure_default_models(models_dir: Path | None = None, backend: str = "cpu", llm: str = DEFAULT_LLM,
                          embedder: str = DEFAULT_EMBEDDER) -> tuple[Path, Path]:
    """The CPU backend gets the int4 CPU target (GGUF blocks kept exactly, the fast build); HTP
    gets the float graphs (fp16 on the NPU) in a directory of their own."""
    quant, context = ("int4", 2048) if backend == "cpu" else ("none", 1024)

    def make_llm(out: Path) -> None:
        log.info("building %s into %s (%s, context %d, prefill 128 and 32) ...", llm, out, quant, context)
        build_model(BuildPlan(weights=llm, out=out, shape=LLMShape(context=context, prefill=(128, 32)),
                              quant=parse_quant(quant)))

    llm_dir = _ensure(llm if backend == "cpu" else f"{llm}-float", models_dir, quant, make_llm)
    return llm_dir, ensure_embedder(embedder, models_dir)


def ensure_embedder(name: str, models_dir: Path | None = None) -> Path:
    """A build of the packaged embedder `name` (batch 8, 128 tokens), reused where it exists."""
    def make_embedder(out: Path) -> None:
        log.info("building %s into %s (batch 8, 128 tokens) ...", name, out)
        build_model(BuildPlan(weights=name, out=out, shape=EmbedderShape(batch=8, seq=128)))

    return _ensure(name, models_dir, "none", make_embedder)


def ensure_sample_kb(kb: KnowledgeBase, second_embedder: Path | None = None) -> None:
    """Ingest the sample KB's documents; unchanged files are skipped on later starts. A KB with no
    answer profile of its own gets the sample's (`hexrag kb profile` changes it). `second_embedder`:
    every chunk gets its vectors too (KnowledgeBase.embed_second)."""
    if second_embedder is not None and kb.second_embedder is None:
        from runtime.embedder import Embedder

        kb.use_second(Embedder(second_embedder), replace=True)
    sample = sample_kb()
    files = sample.document_paths()
    report = kb.ingest(files, progress=True, prune=False)
    # a KB filled from another checkout or install holds the same samples under another path: every
    # passage would be retrieved (and cited) twice
    current, names = {str(p.resolve()) for p in files}, {p.name for p in files}
    for doc in kb.list_documents():
        src = Path(doc.source)
        if src.name in names and src.parent.parts[-2:] == ("knowledge", "samples") and doc.source not in current:
            kb.delete(doc.source)
            log.info("knowledge base %s: removed the sample copy %s", kb.dir, doc.source)
    if kb.profile == AnswerProfile():
        kb.set_profile(sample.answer_profile())
    log.info("knowledge base %s: %d added, %d updated, %d unchanged", kb.dir, len(report.added), len(report.updated),
             len(report.unchanged))
