"""Readers during a large upload: `/v1/knowledge/search` latency, a retrieval-augmented chat's time to
its first token and `/health` latency while one big markdown file is ingested through the API, beside
the same figures on the idle server. Answers and searches must not wait for an ingest.

Searches and /health are probed back to back (every 50 ms); chats follow each other with a user's
pause between them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel

from app.bench.server import Server
from app.bench.soak_load import Latency, stream_chat

PROBE_INTERVAL_S = 0.05


class IngestLoadOptions(BaseModel):
    llm: Path
    embedder: Path
    kb: Path  # copied; never written
    megabytes: float = 5.0
    idle_s: float = 30.0
    question: str | None = None  # default: a heading of the KB's own
    max_tokens: int = 8  # enough for a first token
    think_s: float = 2.0  # between one chat's end and the next question, as a user reads the answer
    threads: int | None = None
    work_dir: Path | None = None


class Phase(BaseModel):
    seconds: float
    search_ms: Latency | None
    ttft_ms: Latency | None  # retrieval-augmented chats, one after another
    health_ms: Latency | None
    failures: int  # answers other than 200 (or a broken stream)


class IngestLoadReport(BaseModel):
    load_before: list[float]
    upload_bytes: int
    chunks: int
    job_status: str
    job_seconds: float
    question: str
    idle: Phase
    during: Phase


def long_markdown(megabytes: float) -> bytes:
    """A long manual: numbered sections of three paragraphs (~1 KB a section)."""
    para = ("Part {i} of a long manual: the {i}th procedure, step by step, with its checks and its warnings, "
            "written out in full for the reader who follows it. ")
    sections = max(1, int(megabytes * 1_000_000 / 913))
    return "".join(f"# Section {i}\n\n" + "\n\n".join(para.format(i=i) * 2 for _ in range(3)) + "\n\n"
                   for i in range(sections)).encode()


async def _loop(call, until: Callable[[], bool], latencies: list[float], failures: list[int],
                pause: float = PROBE_INTERVAL_S) -> None:
    while not until():
        started = time.perf_counter()
        ok = await call()
        (latencies if ok else failures).append(time.perf_counter() - started)
        await asyncio.sleep(pause)


async def _phase(client: httpx.AsyncClient, question: str, max_tokens: int, think_s: float,
                 until: Callable[[], bool]) -> Phase:
    search, health, ttft, failures = [], [], [], []

    async def one_search() -> bool:
        r = await client.post("/v1/knowledge/search", json={"query": question, "k": 4})
        return r.status_code == 200

    async def one_health() -> bool:
        return (await client.get("/health")).status_code == 200

    async def chats() -> None:
        body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens}
        while not until():
            outcome = await stream_chat(client, body)
            if outcome.ok and outcome.ttft_s is not None:
                ttft.append(outcome.ttft_s)
            else:
                failures.append(0.0)
            await asyncio.sleep(think_s)

    started = time.perf_counter()
    await asyncio.gather(_loop(one_search, until, search, failures), _loop(one_health, until, health, failures),
                         chats())
    return Phase(seconds=time.perf_counter() - started, search_ms=Latency.of(search), ttft_ms=Latency.of(ttft),
                 health_ms=Latency.of(health), failures=len(failures))


def _default_question(kb: Path) -> str:
    from knowledge import KnowledgeBase

    with KnowledgeBase.open(kb) as k:
        hits = k.all_hits()
    heading = next((h.heading for h in hits if h.heading), None)
    return (heading or hits[0].text[:80]).split(" > ")[-1] if hits else "What does the manual say?"


async def _measure(url: str, o: IngestLoadOptions, question: str, body: bytes) -> tuple[Phase, Phase, dict, float]:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120, connect=10)) as client:
        t0 = time.perf_counter()
        idle = await _phase(client, question, o.max_tokens, o.think_s, lambda: time.perf_counter() - t0 > o.idle_s)
        r = await client.post("/v1/knowledge/documents", files={"files": ("long-manual.md", body)}, timeout=600)
        if r.status_code != 202:
            raise RuntimeError(f"upload answered {r.status_code}: {r.text[:300]}")
        job = r.json()
        up = time.perf_counter()
        done = asyncio.Event()

        async def follow() -> None:
            nonlocal job
            while job["status"] in ("queued", "running"):
                await asyncio.sleep(0.5)
                job = (await client.get(f"/v1/knowledge/jobs/{job['id']}")).json()
            done.set()

        follower = asyncio.create_task(follow())
        during = await _phase(client, question, o.max_tokens, o.think_s, done.is_set)
        await follower
        return idle, during, job, time.perf_counter() - up


def run_ingest_load(o: IngestLoadOptions, progress: Callable[[str], None] = lambda _: None) -> IngestLoadReport:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would drown the report
    question = o.question or _default_question(o.kb)
    body = long_markdown(o.megabytes)
    with contextlib.ExitStack() as stack:
        work = o.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hexrag-ingest-load-")))
        kb = work / "kb"
        shutil.copytree(o.kb, kb, ignore=shutil.ignore_patterns("uploads"))
        load_before = [round(x, 2) for x in os.getloadavg()]
        server = Server(o.llm, o.embedder, kb, work / "server.log", threads=o.threads)
        stack.callback(server.stop)
        server.wait_ready()
        progress(f"server ready; {o.idle_s:.0f} s idle, then a {len(body) / 1e6:.1f} MB upload")
        idle, during, job, seconds = asyncio.run(_measure(server.url, o, question, body))
    return IngestLoadReport(load_before=load_before, upload_bytes=len(body), chunks=job.get("chunks", 0),
                            job_status=job["status"], job_seconds=seconds, question=question, idle=idle,
                            during=during)


def format_report(r: IngestLoadReport) -> str:
    lines = [f"load before {r.load_before}; question {r.question!r}",
             f"upload {r.upload_bytes / 1e6:.1f} MB: job {r.job_status} after {r.job_seconds:.1f} s, {r.chunks} chunks"]
    for name, phase in (("idle", r.idle), ("during the ingest", r.during)):
        lines.append(f"{name} ({phase.seconds:.0f} s, {phase.failures} failures):")
        for label, value in (("search", phase.search_ms), ("chat TTFT", phase.ttft_ms), ("/health", phase.health_ms)):
            lines.append(f"  {label:<10} {value.line() if value else 'no samples'}")
    if r.idle.ttft_ms and r.during.ttft_ms:
        lines.append(f"chat TTFT during / idle: p50 {r.during.ttft_ms.p50 / r.idle.ttft_ms.p50:.2f}x")
    return "\n".join(lines)
