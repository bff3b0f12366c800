"""The load half of the soak: streaming chat clients against a running server, its resident memory
over time, and /health latency while a large upload is ingested under an active stream.

A stream is judged by its wire format alone: `data: ` events, each a JSON chat.completion.chunk
(or an OpenAI-shaped error event, a well-formed failure), and `data: [DONE]` last. Anything else,
including a connection that ends early, is a broken stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from pydantic import BaseModel

from app.bench.server import rss_kb

STREAM_TIMEOUT = httpx.Timeout(connect=10, read=300, write=30, pool=30)
BROKEN_EXAMPLES = 5  # reasons kept in the report
# a prompt small models answer at length, so one stream produces tokens for a while
TALKER_PROMPT = "Tell me a long story."
FIRST_TOKEN_TIMEOUT_S = 300.0


# ---- one streaming request --------------------------------------------------------------------
@dataclass
class StreamOutcome:
    status: int | None  # HTTP status; None: no answer at all (connection refused or reset)
    retry_after: str | None = None
    done: bool = False  # `data: [DONE]` arrived
    broken: str | None = None  # why the stream is broken
    error_event: str | None = None  # the code of an error event (a failure the stream reported)
    started: float = 0.0  # perf_counter
    token_times: list[float] = field(default_factory=list)  # arrival of each event with content

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.done and self.broken is None and self.error_event is None

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.started if self.token_times else None

    def gaps(self) -> list[tuple[float, float]]:
        """(end time, gap in s) between consecutive content events."""
        t = self.token_times
        return [(b, b - a) for a, b in zip(t, t[1:])]


def _event_problem(data: str) -> tuple[str | None, str | None, bool]:
    """(why the event is malformed, the code of an error event, whether it has content)."""
    try:
        event = json.loads(data)
    except ValueError:
        return f"malformed JSON event {data[:60]!r}", None, False
    if not isinstance(event, dict):
        return f"event is not an object: {data[:60]!r}", None, False
    if "error" in event:
        error = event["error"]
        return (None, str(error.get("code")), False) if isinstance(error, dict) else ("malformed error event", None, False)
    choices = event.get("choices")
    if event.get("object") != "chat.completion.chunk" or not isinstance(choices, list):
        return f"not a chat.completion.chunk: {data[:60]!r}", None, False
    content = any(isinstance(c, dict) and (c.get("delta") or {}).get("content") for c in choices)
    return None, None, bool(content)


async def stream_chat(client: httpx.AsyncClient, body: dict, out: StreamOutcome | None = None) -> StreamOutcome:
    """One streaming request, judged; `out` is filled in place (so a cancelled caller keeps what arrived)."""
    out = out or StreamOutcome(status=None)
    out.started = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            out.status, out.retry_after = r.status_code, r.headers.get("retry-after")
            if r.status_code != 200:
                await r.aread()
                return out
            async for line in r.aiter_lines():
                if not line:
                    continue  # the blank line between events
                if out.done:
                    out.broken = "an event after [DONE]"
                    break
                if not line.startswith("data: "):
                    out.broken = f"not an SSE data line: {line[:60]!r}"
                    break
                if line == "data: [DONE]":
                    out.done = True
                    continue
                problem, code, content = _event_problem(line[6:])
                if problem:
                    out.broken = problem
                    break
                out.error_event = out.error_event or code
                if content:
                    out.token_times.append(time.perf_counter())
    except httpx.HTTPError as e:
        if out.status == 200:
            out.broken = f"connection lost mid-stream ({type(e).__name__})"
        return out
    if out.status == 200 and not out.done and out.broken is None:
        out.broken = "ended without [DONE]"
    return out


# ---- report shapes ----------------------------------------------------------------------------
class Latency(BaseModel):
    """Milliseconds."""
    samples: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency | None:
        if not seconds:
            return None
        ms = np.array(seconds) * 1000
        return cls(samples=len(ms), p50=float(np.percentile(ms, 50)), p90=float(np.percentile(ms, 90)),
                   p99=float(np.percentile(ms, 99)), max=float(ms.max()))

    def line(self) -> str:
        return f"p50 {self.p50:.0f} ms, p90 {self.p90:.0f} ms, p99 {self.p99:.0f} ms, max {self.max:.0f} ms (n={self.samples})"


class StreamStats(BaseModel):
    requests: int
    succeeded: int  # 200, well-formed, ended with [DONE], no error event
    rejected_429: int
    rejected_503: int
    rejections_without_retry_after: int  # 429/503 answers that lacked Retry-After
    other_status: dict[str, int]  # any other HTTP status (or "no answer") and its count
    error_events: int  # streams that reported a failure in an error event, then [DONE]
    broken: int  # streams that ended without [DONE] or carried a malformed event
    broken_examples: list[str]
    content_events: int
    ttft_ms: Latency | None  # request sent -> first event with content, over succeeded streams

    @classmethod
    def of(cls, outcomes: list[StreamOutcome]) -> StreamStats:
        rejected = [o for o in outcomes if o.status in (429, 503)]
        other: dict[str, int] = {}
        for o in outcomes:
            if o.status not in (200, 429, 503):
                key = str(o.status) if o.status is not None else "no answer"
                other[key] = other.get(key, 0) + 1
        broken = [o for o in outcomes if o.broken]
        return cls(requests=len(outcomes), succeeded=sum(o.ok for o in outcomes),
                   rejected_429=sum(o.status == 429 for o in outcomes),
                   rejected_503=sum(o.status == 503 for o in outcomes),
                   rejections_without_retry_after=sum(not o.retry_after for o in rejected), other_status=other,
                   error_events=sum(o.error_event is not None for o in outcomes), broken=len(broken),
                   broken_examples=[o.broken for o in broken[:BROKEN_EXAMPLES]],
                   content_events=sum(len(o.token_times) for o in outcomes),
                   ttft_ms=Latency.of([o.ttft_s for o in outcomes if o.ok and o.ttft_s is not None]))


class RSSDrift(BaseModel):
    """Server resident memory (VmRSS). The first `warmup_share` of the run is warm-up; the baseline is
    the median of the samples up to the end of the first quarter after it, the final figure the
    median of the last quarter of the run; drift = final / baseline - 1."""
    samples: int
    interval_s: float
    warmup_s: float
    start_mb: float
    baseline_mb: float
    final_mb: float
    peak_mb: float
    drift_pct: float


class LoadReport(BaseModel):
    clients: int
    seconds: float
    streams: StreamStats
    rss: RSSDrift | None


class UploadProbeReport(BaseModel):
    files: int
    upload_bytes: int
    post_ms: float  # POST /v1/knowledge/documents until its 202
    job_status: str
    job_seconds: float  # POST sent -> job finished
    added: int
    chunks: int
    health_idle_ms: Latency | None  # the same probe before the upload (one stream running)
    health_ms: Latency | None  # while the upload was being ingested
    health_failures: int  # /health answers other than 200 while probing
    stream_tokens_during_upload: int  # content events of the running stream inside the upload window
    stream_gap_idle_ms: Latency | None  # inter-token gaps before the upload
    stream_gap_ms: Latency | None  # inter-token gaps that ended inside the upload window
    stream_broken: int


# ---- 1. concurrent streaming clients ----------------------------------------------------------
def rss_drift(samples: list[tuple[float, int]], interval_s: float, warmup_share: float = 0.1) -> RSSDrift | None:
    """From (seconds since start, KiB) samples; see RSSDrift."""
    if len(samples) < 8:
        return None
    t = np.array([s[0] for s in samples])
    mb = np.array([s[1] for s in samples]) / 1024
    span = t[-1] - t[0]
    warm_end = t[0] + warmup_share * span
    base = mb[(t >= warm_end) & (t < warm_end + 0.25 * (span - warm_end + t[0]))]
    final = mb[t >= t[0] + 0.75 * span]
    if not len(base) or not len(final):
        return None
    baseline, last = float(np.median(base)), float(np.median(final))
    return RSSDrift(samples=len(mb), interval_s=interval_s, warmup_s=float(warm_end - t[0]), start_mb=float(mb[0]),
                    baseline_mb=baseline, final_mb=last, peak_mb=float(mb.max()),
                    drift_pct=100 * (last / baseline - 1))


async def _sample_rss(pid: int, interval_s: float, out: list[tuple[float, int]], stop: asyncio.Event) -> None:
    start = time.perf_counter()
    while not stop.is_set():
        if (kb := rss_kb(pid)) is not None:
            out.append((time.perf_counter() - start, kb))
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass


async def _client(client: httpx.AsyncClient, n: int, clients: int, questions: list[str], deadline: float,
                  max_tokens: int | None, rag: bool, outcomes: list[StreamOutcome]) -> None:
    """One user asking question after question (at least one); after a 429/503 it waits as
    Retry-After says."""
    k = n
    while True:
        body = {"model": "hexrag", "rag": rag, "messages": [{"role": "user", "content": questions[k % len(questions)]}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        k += clients
        outcome = await stream_chat(client, body)
        outcomes.append(outcome)
        if time.perf_counter() >= deadline:
            return
        if outcome.status != 200:
            wait = float(outcome.retry_after) if (outcome.retry_after or "").isdigit() else 1.0
            await asyncio.sleep(max(0.0, min(wait, deadline - time.perf_counter())))


async def run_clients(url: str, server_pid: int, clients: int, seconds: float, questions: list[str],
                      max_tokens: int | None, rag: bool = True) -> LoadReport:
    """The clients' connections are opened first, so their first requests arrive together."""
    outcomes: list[StreamOutcome] = []
    samples: list[tuple[float, int]] = []
    interval = min(2.0, max(0.2, seconds / 100))
    async with contextlib.AsyncExitStack() as stack:
        pool = [await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=STREAM_TIMEOUT))
                for _ in range(clients)]
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_rss(server_pid, interval, samples, stop))
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(_client(client, n, clients, questions, deadline, max_tokens, rag, outcomes)
                               for n, client in enumerate(pool)))
        stop.set()
        await sampler
    return LoadReport(clients=clients, seconds=time.perf_counter() - started, streams=StreamStats.of(outcomes),
                      rss=rss_drift(samples, interval))


# ---- 2. /health during a large upload, under an active stream -------------------------------
async def _talk(url: str, max_tokens: int | None, outcomes: list[StreamOutcome], stop: asyncio.Event) -> None:
    """One plain (no retrieval) chat after another: the model's tokens stream one by one."""
    async with httpx.AsyncClient(base_url=url, timeout=STREAM_TIMEOUT) as client:
        while not stop.is_set():
            body = {"model": "hexrag", "rag": False, "max_tokens": max_tokens or 200, "temperature": 0.7,
                    "seed": len(outcomes), "messages": [{"role": "user", "content": TALKER_PROMPT}]}
            outcome = StreamOutcome(status=None)
            outcomes.append(outcome)
            await stream_chat(client, body, outcome)
            if outcome.status not in (200, 429, 503):
                raise RuntimeError(f"the streaming chat was refused with {outcome.status}")
            if outcome.status != 200:
                await asyncio.sleep(1.0)


async def _probe_health(client: httpx.AsyncClient, interval_s: float, latencies: list[float], failures: list[int],
                        stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            r = await client.get("/health")
            if r.status_code != 200:
                failures.append(r.status_code)
        except httpx.HTTPError:
            failures.append(0)
        latencies.append(time.perf_counter() - t0)
        await asyncio.sleep(interval_s)


async def _probe_for(client: httpx.AsyncClient, seconds: float, interval_s: float) -> tuple[list[float], list[int]]:
    latencies: list[float] = []
    failures: list[int] = []
    stop = asyncio.Event()
    task = asyncio.create_task(_probe_health(client, interval_s, latencies, failures, stop))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return latencies, failures


def _gaps_in(outcomes: list[StreamOutcome], start: float, end: float) -> list[float]:
    return [gap for o in outcomes for t, gap in o.gaps() if start <= t <= end]


async def run_upload_probe(url: str, files: list[Path], idle_s: float, interval_s: float = 0.05,
                           max_tokens: int | None = None, job_timeout_s: float = 1800) -> UploadProbeReport:
    talk: list[StreamOutcome] = []
    stop_talk = asyncio.Event()
    talker = asyncio.create_task(_talk(url, max_tokens, talk, stop_talk))
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        deadline = time.perf_counter() + FIRST_TOKEN_TIMEOUT_S
        while not any(o.token_times for o in talk):  # the stream is producing tokens
            if talker.done():
                talker.result()  # raises what stopped it
            if time.perf_counter() > deadline:
                talker.cancel()
                raise RuntimeError(f"the streaming chat produced no token in {FIRST_TOKEN_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.05)
        idle_start = time.perf_counter()
        idle, _ = await _probe_for(client, idle_s, interval_s)
        idle_end = time.perf_counter()

        payload = [("files", (f.name, f.read_bytes(), "text/markdown")) for f in files]
        latencies: list[float] = []
        failures: list[int] = []
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe_health(client, interval_s, latencies, failures, stop))
        up_start = time.perf_counter()
        r = await client.post("/v1/knowledge/documents", files=payload, timeout=600)
        post_s = time.perf_counter() - up_start
        if r.status_code != 202:
            stop.set()
            await probe
            stop_talk.set()
            talker.cancel()
            raise RuntimeError(f"upload answered {r.status_code}: {r.text[:300]}")
        job = r.json()
        deadline = up_start + job_timeout_s
        while job["status"] in ("queued", "running") and time.perf_counter() < deadline:
            await asyncio.sleep(0.5)
            job = (await client.get(f"/v1/knowledge/jobs/{job['id']}")).json()
        up_end = time.perf_counter()
        stop.set()
        await probe
    stop_talk.set()
    talker.cancel()  # a disconnect cancels the running generation on the server
    try:
        await talker
    except asyncio.CancelledError:
        pass
    tokens = sum(1 for o in talk for t in o.token_times if up_start <= t <= up_end)
    return UploadProbeReport(
        files=len(files), upload_bytes=sum(len(p[1][1]) for p in payload), post_ms=post_s * 1000,
        job_status=job["status"], job_seconds=up_end - up_start, added=len(job.get("added", [])),
        chunks=job.get("chunks", 0), health_idle_ms=Latency.of(idle), health_ms=Latency.of(latencies),
        health_failures=len(failures), stream_tokens_during_upload=tokens,
        stream_gap_idle_ms=Latency.of(_gaps_in(talk, idle_start, idle_end)),
        stream_gap_ms=Latency.of(_gaps_in(talk, up_start, up_end)),
        stream_broken=sum(o.broken is not None for o in talk))  # (the one cut by the cancel is not judged)
