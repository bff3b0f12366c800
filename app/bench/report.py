"""`hexrag eval --all`: one JSON report of accuracy and speed, and the metrics a baseline gates.

    models (quick: tiny ones built here; full: the real builds) ─► sample KB ingested into a temp dir
    ─► retrieval recall/MRR ─► embedder float vs quantized (cosine, recall) ─► LLM float vs quantized
       (perplexity, greedy agreement, logits cosine) ─► RAG TTFT by stage ─► answer quality (full)
    ─► engine vs bare-graph speed ratios ─► gate (baseline.py)

Every section reuses the code its own command runs: knowledge.evaluation (`hexrag eval retrieval`),
build_scripts.quantize.evaluate.compare_dirs, app.assistant.Assistant (`hexrag ask`).
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from app.bench.baseline import gate_metrics
from app.bench.errors import BenchError
from models.manifest import package_versions

log = logging.getLogger(__name__)
EVAL_QUESTIONS = "eval_questions.jsonl"
FULL_EVAL_SAMPLES, FULL_EVAL_TOKENS = 8, 128  # held-out text for the real LLM: ~2 × 1000 decode steps
ANSWER_MAX_TOKENS = 96


def commit() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _sample_kb(kb_dir: Path, embedder_dir: Path):
    from app.quickstart import ensure_sample_kb
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    kb = KnowledgeBase.open(kb_dir, Embedder(embedder_dir))
    ensure_sample_kb(kb)
    return kb


def _retrieval(kb, modes=("dense", "bm25", "hybrid")) -> dict:
    from knowledge.evaluation import evaluate, load_questions
    from knowledge.sample_kb import SAMPLES

    return evaluate(kb, load_questions(SAMPLES / EVAL_QUESTIONS), modes=modes).to_dict()


def _recall(section: dict, mode: str) -> float | None:
    return next((r["recall@5"] for r in section["results"] if r["mode"] == mode and r["lang"] == "all"), None)


def _embedder_section(float_dir: Path, quant_dir: Path | None, float_retrieval: dict, work: Path) -> dict:
    if quant_dir is None:
        return {"skipped": "no quantized embedder (pass --quantized-embedder DIR)"}
    from build_scripts.quantize.evaluate import compare_dirs

    out = compare_dirs(float_dir, quant_dir)
    kb = _sample_kb(work / "kb_quantized", quant_dir)
    try:
        quant = _retrieval(kb, modes=("dense", "hybrid"))
    finally:
        kb.close()
    for mode in ("dense", "hybrid"):
        out[f"{mode}_recall@5_quantized"] = _recall(quant, mode)
        out[f"{mode}_recall@5_change"] = round(_recall(quant, mode) - _recall(float_retrieval, mode), 4)
    return out


def _llm_section(float_dir: Path, quant_dir: Path | None, quick: bool) -> dict:
    if quant_dir is None:
        return {"skipped": "no quantized LLM (pass --quantized-llm DIR; build one with "
                           "`python -m build_scripts.quantize.evaluate --model DIR`)"}
    from build_scripts.quantize.evaluate import compare_dirs

    if quick:
        return compare_dirs(float_dir, quant_dir)
    return compare_dirs(float_dir, quant_dir, eval_samples=FULL_EVAL_SAMPLES, eval_tokens=FULL_EVAL_TOKENS)


def _check_model(path: Path, what: str, flag: str) -> Path:
    if not (path / "manifest.json").is_file():
        raise BenchError(f"no {what} at {path}: run `hexrag quickstart` (or `hexrag build`) or pass {flag} DIR")
    return path


def run_report(quick: bool, llm: Path | None = None, embedder: Path | None = None,
               quantized_llm: Path | None = None, quantized_embedder: Path | None = None,
               progress: bool = True) -> dict:
    from app.assistant import Assistant
    from app.bench.answers import evaluate_answers, load_answer_questions
    from app.bench.overhead import speed_ratios
    from app.bench.rag_timing import rag_ttft
    from app.settings import Settings
    from knowledge.sample_kb import SAMPLES

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hexrag-eval-") as tmp:
        work = Path(tmp)
        if quick:
            from app.bench.quick import build_quick_models

            log.info("eval: building tiny models into %s", work)
            qm = build_quick_models(work / "models")
            llm, embedder, quantized_llm, quantized_embedder = qm.llm, qm.embedder, qm.llm_quantized, qm.embedder_quantized
        else:
            defaults = Settings()
            llm = _check_model(llm or defaults.llm, "LLM", "--llm")
            embedder = _check_model(embedder or defaults.embedder, "embedder", "--embedder")
            for path, flag in ((quantized_llm, "--quantized-llm"), (quantized_embedder, "--quantized-embedder")):
                if path is not None:
                    _check_model(path, "model", flag)
        report = {"mode": "quick" if quick else "full", "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "commit": commit(), "versions": package_versions("hexrag", "onnxruntime", "onnx"),
                  "models": {"llm": str(llm), "embedder": str(embedder), "quantized_llm": str(quantized_llm),
                             "quantized_embedder": str(quantized_embedder)} if not quick else "tiny random-weight models"}
        log.info("eval: retrieval on the sample KB")
        kb = _sample_kb(work / "kb", embedder)
        try:
            report["retrieval"] = _retrieval(kb)
        finally:
            kb.close()
        log.info("eval: embedder float vs quantized")
        report["embedder_quantization"] = _embedder_section(embedder, quantized_embedder, report["retrieval"], work)
        log.info("eval: LLM float vs quantized")
        report["llm_quantization"] = _llm_section(llm, quantized_llm, quick)
        settings = Settings(llm=llm, embedder=embedder, kb=work / "kb", default_max_tokens=ANSWER_MAX_TOKENS)
        assistant = Assistant(settings)
        try:
            log.info("eval: RAG time to first token")
            report["rag_ttft"] = rag_ttft(assistant)
            if quick:
                report["answers"] = {"skipped": "full mode only (random-weight models state no facts)"}
            else:
                log.info("eval: answer quality")
                report["answers"] = evaluate_answers(assistant, load_answer_questions(SAMPLES / "answer_questions.jsonl"),
                                                     progress=progress)
        finally:
            assistant.kb.close()
        del assistant
        log.info("eval: engine vs bare-graph speed")
        report["speed"] = speed_ratios(llm)
    report["gate"] = gate_metrics(report)
    report["seconds"] = round(time.perf_counter() - start, 1)
    return report
