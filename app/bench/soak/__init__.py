"""Soak and fault run against a real server: `python -m app.bench.soak` / `hexrag bench soak`.

One `hexrag serve` process (started here, at lower priority with `nice`) on a copy of the given KB:

1. N streaming chat clients for T minutes: successes, 429/503 answers and their Retry-After,
   broken streams, TTFT percentiles, and the server's resident-memory drift after warm-up;
2. /health latency while an N-file upload is ingested and one plain chat keeps streaming tokens,
   with that stream's inter-token gaps (and both figures before the upload, for comparison);
3. SIGKILL trials: `hexrag ingest` killed while the server reads the same KB, then the server itself
   killed during uploads (app.bench.soak_faults says what makes a trial consistent);
4. with `fuzz`, the schemathesis test of the API from a source checkout, as one line.

The given KB is only read (copied); everything is written under a work folder.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from app.bench.errors import BenchError
from app.bench.report import commit
from app.bench.server import Server
from app.bench.soak_faults import KillReport, after, fault_queries, ingest_kill_trials, server_kill_trials
from app.bench.soak_load import LoadReport, UploadProbeReport, run_clients, run_upload_probe

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS = ROOT / "knowledge" / "samples" / "answer_questions.jsonl"
FUZZ_TEST = ROOT / "tests" / "test_api_fuzz.py"
# in-car questions for the fault trials' query set (answered from the sample KB)
FAULT_QUESTIONS = ["What should I do when the tyre pressure warning light comes on?",
                   "How long does DC fast charging take from 10 to 80 percent?", "roadside assistance phone number"]


class SoakOptions(BaseModel):
    llm: Path
    embedder: Path
    kb: Path  # copied, never written
    clients: int = 8
    minutes: float = 10.0
    max_tokens: int | None = None  # None: the server's default
    rag: bool = True  # the clients' answers come from the KB (False: plain chat, every request runs the model)
    questions: Path | None = None  # one question a line, or JSONL with "question"; default the sample questions
    max_queue: int | None = None  # the server's queue behind the running generation (None: its default)
    upload_files: int = 100
    idle_s: float = 10.0  # /health and token gaps measured this long before the upload
    kill_trials: int = 20  # per victim
    kill_files: int = 8  # files each killed ingest / upload works on
    nice: int = 5
    threads: int | None = None  # the server's CPU threads (None: its default)
    seed: int = 0
    work_dir: Path | None = None  # kept; default a temporary folder, removed afterwards
    fuzz: bool = False


class Target(BaseModel):
    name: str
    target: str
    measured: str
    met: bool


class SoakReport(BaseModel):
    date: str
    commit: str | None
    options: SoakOptions
    load_before: str  # /proc/loadavg: 1, 5 and 15 minute load averages
    load_after_streams: str
    load_after: str
    streams: LoadReport | None
    upload: UploadProbeReport | None
    ingest_kills: KillReport | None
    server_kills: KillReport | None
    fuzz: str | None  # the fuzz test's closing line, or why it did not run
    targets: list[Target]
    seconds: float


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def load_questions(path: Path = QUESTIONS) -> list[str]:
    """Questions from a text file (one a line) or a JSONL file whose objects have a `question`."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    try:
        return [json.loads(line)["question"] if line.startswith("{") else line for line in lines]
    except (ValueError, KeyError, TypeError):
        raise BenchError(f"{path}: a line that starts with {{ must be a JSON object with a question") from None


def _check_options(o: SoakOptions) -> None:
    for name, path, marker in (("--llm", o.llm, "manifest.json"), ("--embedder", o.embedder, "manifest.json"),
                               ("--kb", o.kb, "kb.sqlite")):
        if not (path / marker).is_file():
            raise BenchError(f"{name} {path}: no {marker} there")
    if o.clients < 1 or o.minutes <= 0 or o.upload_files < 1 or o.kill_trials < 0 or o.kill_files < 1:
        raise BenchError("--clients, --minutes, --upload-files and --kill-files must be positive, "
                         "--kill-trials at least 0")
    if not Path("/proc/self/status").exists():
        raise BenchError("the soak reads the server's memory from /proc: it runs on Linux only")


def run_fuzz() -> str:
    if not FUZZ_TEST.is_file():
        return f"not run: {FUZZ_TEST.relative_to(ROOT)} is part of a source checkout"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(FUZZ_TEST)], cwd=ROOT,
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else f"pytest exited {proc.returncode}: {proc.stderr.strip()[-200:]}"


def targets(r: SoakReport) -> list[Target]:
    out = []
    if r.streams:
        s = r.streams.streams
        out.append(Target(name="broken streams", target="0", measured=f"{s.broken} of {s.requests}",
                          met=s.broken == 0))
        rejected = s.rejected_429 + s.rejected_503
        out.append(Target(name="429/503 with Retry-After", target="all",
                          measured=f"{rejected - s.rejections_without_retry_after} of {rejected}",
                          met=s.rejections_without_retry_after == 0))
        if r.streams.rss:
            out.append(Target(name="server RSS drift after warm-up", target="< 5%",
                              measured=f"{r.streams.rss.drift_pct:+.1f}%", met=abs(r.streams.rss.drift_pct) < 5))
    for kills in (r.ingest_kills, r.server_kills):
        if kills and kills.trials:
            writes = kills.landed_in_index_write + kills.landed_in_sidecar_write
            out.append(Target(name=f"{kills.victim} SIGKILL trials consistent", target="all",
                              measured=f"{kills.consistent}/{len(kills.trials)} ({writes} inside an index-file write)",
                              met=kills.consistent == len(kills.trials) and writes > 0))
    if r.upload and r.upload.health_ms:
        u = r.upload
        active = u.stream_tokens_during_upload > 0
        out.append(Target(name=f"/health during a {u.files}-file upload, stream active", target="< 100 ms",
                          measured=f"p99 {u.health_ms.p99:.0f} ms, max {u.health_ms.max:.0f} ms, "
                                   f"{u.stream_tokens_during_upload} tokens streamed meanwhile",
                          met=u.health_ms.max < 100 and active and u.health_failures == 0))
    return out


def run_soak(o: SoakOptions, progress: Callable[[str], None] = lambda line: None) -> SoakReport:
    _check_options(o)
    started = time.perf_counter()
    work = o.work_dir or Path(tempfile.mkdtemp(prefix="hexrag-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    kb_dir = (work / "kb").resolve()
    if kb_dir.exists():
        raise BenchError(f"{kb_dir} exists: give an empty --work-dir")
    shutil.copytree(o.kb, kb_dir, ignore=shutil.ignore_patterns("*.lock"))
    rng = random.Random(o.seed)
    questions = load_questions(o.questions or QUESTIONS)
    if not questions:
        raise BenchError(f"no questions in {o.questions}")
    from knowledge.bench import write_corpus
    from runtime.embedder import Embedder

    say = lambda line: progress(f"[{time.perf_counter() - started:6.1f}s] {line}")  # noqa: E731

    def start_server() -> Server:
        return Server(o.llm, o.embedder, kb_dir, work / "server.log", nice=o.nice, threads=o.threads,
                      max_queue=o.max_queue)

    report = dict(date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), commit=commit(), options=o,
                  load_before=loadavg(), streams=None, upload=None, ingest_kills=None, server_kills=None, fuzz=None)
    server = start_server()
    try:
        server.wait_ready()
        say(f"server ready (pid {server.pid}); {o.clients} streaming clients for {o.minutes:g} min")
        report["streams"] = asyncio.run(run_clients(server.url, server.pid, o.clients, o.minutes * 60,
                                                    questions, o.max_tokens, o.rag))
        report["load_after_streams"] = loadavg()
        say(f"streams done; /health during a {o.upload_files}-file upload")
        files = write_corpus(work / "upload", o.upload_files, seed=o.seed + 100, prefix="upload")
        report["upload"] = asyncio.run(run_upload_probe(server.url, files, o.idle_s, max_tokens=o.max_tokens))
        say(f"upload job {report['upload'].job_status} after {report['upload'].job_seconds:.1f}s")
        if o.kill_trials:
            embedder = Embedder(o.embedder)
            folder = work / "ingest"
            a_files = write_corpus(folder, o.kill_files, seed=o.seed + 200, prefix="ingest")
            queries = fault_queries(a_files, FAULT_QUESTIONS)
            say(f"{o.kill_trials} SIGKILL trials of `hexrag ingest` ({o.kill_files} files)")
            report["ingest_kills"] = ingest_kill_trials(kb_dir, folder, work, embedder, o.embedder, server.url,
                                                        o.kill_trials, queries, rng, say)
            b_files = write_corpus(work / "server", o.kill_files, seed=o.seed + 300, prefix="server")
            queries = fault_queries(b_files, FAULT_QUESTIONS)
            say(f"{o.kill_trials} SIGKILL trials of the server during uploads ({o.kill_files} files)")
            report["server_kills"], server = server_kill_trials(server, start_server, kb_dir, work / "server", work,
                                                                embedder, o.kill_trials, queries, rng, say)
    finally:
        server.stop()
    report["load_after"] = loadavg()
    report.setdefault("load_after_streams", report["load_after"])
    report["fuzz"] = run_fuzz() if o.fuzz else "not run (--fuzz runs tests/test_api_fuzz.py)"
    result = SoakReport(**report, targets=[], seconds=time.perf_counter() - started)
    result.targets = targets(result)
    if o.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return result


# ---- the human-readable report ----------------------------------------------------------------
def format_report(r: SoakReport) -> str:
    o = r.options
    lines = [f"soak {r.date}, hexrag {r.commit or '?'}: {o.llm.name} + {o.embedder.name}, KB {o.kb} "
             f"(server at nice {o.nice}); load {r.load_before} before, {r.load_after} after"]
    if r.streams:
        s, rss = r.streams.streams, r.streams.rss
        lines += [f"\n{r.streams.clients} streaming clients for {r.streams.seconds / 60:.1f} min "
                  f"(load {r.load_after_streams} at the end)",
                  f"  requests {s.requests}: {s.succeeded} succeeded, {s.rejected_429} x 429, {s.rejected_503} x 503 "
                  f"({s.rejections_without_retry_after} without Retry-After), other {s.other_status or 'none'}",
                  f"  broken streams {s.broken}{': ' + '; '.join(s.broken_examples) if s.broken else ''}, "
                  f"error events {s.error_events}, content events {s.content_events}"]
        if s.ttft_ms:
            lines.append(f"  TTFT {s.ttft_ms.line()}")
        if rss:
            lines.append(f"  server RSS {rss.start_mb:.0f} MB at start, {rss.baseline_mb:.0f} MB after "
                         f"{rss.warmup_s:.0f}s warm-up, {rss.final_mb:.0f} MB in the last quarter (peak "
                         f"{rss.peak_mb:.0f} MB): drift {rss.drift_pct:+.1f}%")
    if r.upload:
        u = r.upload
        lines += [f"\n/health during a {u.files}-file upload ({u.upload_bytes / 1024:.0f} KiB, 202 after "
                  f"{u.post_ms:.0f} ms, job {u.job_status} after {u.job_seconds:.1f}s, {u.chunks} chunks)"]
        for label, value in (("  /health before the upload", u.health_idle_ms), ("  /health during the upload", u.health_ms),
                             ("  token gaps before", u.stream_gap_idle_ms), ("  token gaps during", u.stream_gap_ms)):
            lines.append(f"{label}: {value.line() if value else 'no samples'}")
        lines.append(f"  {u.stream_tokens_during_upload} tokens streamed during the upload, "
                     f"{u.health_failures} /health failures, {u.stream_broken} broken streams")
    for kills in (r.ingest_kills, r.server_kills):
        if kills is None:
            continue
        title = "`hexrag ingest` killed while the server reads" if kills.victim == "ingest" else \
            "server killed during uploads"
        lines.append(f"\n{title}: {kills.consistent}/{len(kills.trials)} consistent ({kills.files} files, "
                     f"{kills.reference_s:.1f}s uninterrupted; {kills.landed_in_index_write} kills inside the index "
                     f"write, {kills.landed_in_sidecar_write} inside the sidecar write, {kills.missed} missed and "
                     f"tried again; {kills.queries} queries compared)")
        for t in kills.trials:
            state = "consistent" if t.consistent else "; ".join(t.problems)
            rebuilt = f", rebuilt: {t.rebuilt}" if t.rebuilt else ""
            lines.append(f"  {t.n:2d} {t.aimed_at:13s} -> {t.landed}{after(t.at_s)}; on disk {t.at_kill}"
                         f"{rebuilt}: {state}")
    lines.append(f"\nfuzz: {r.fuzz}")
    lines.append("\ntargets:")
    lines += [f"  {'met   ' if t.met else 'MISSED'} {t.name}: {t.measured} (target {t.target})" for t in r.targets]
    lines.append(f"\n{r.seconds / 60:.1f} min in all")
    return "\n".join(lines)
