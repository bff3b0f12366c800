"""The knowledge base's writer: one thread that runs upload ingest jobs and deletes in order, off the
event loop, so health checks, model lists and running streams never wait for an ingest. Between
them it runs the background work that follows the KB (the kept passage rows, `keep_filling`),
which yields to answers between its steps like an ingest does."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from app.errors import APIError
from app.priority import Foreground
from app.uploads import ingest_staged
from knowledge import IngestCancelled, KnowledgeBase, KnowledgeError

log = logging.getLogger(__name__)
T = TypeVar("T")
KEEP_FINISHED = 200  # finished jobs remembered for GET /v1/knowledge/jobs/{id}
# quiet before the fill computes its next passage: a user's follow-up question often comes within
# seconds, and one that arrives during a passage waits for it
FILL_IDLE_S = 2.0


class FileFailure(BaseModel):
    file: str
    reason: str


class JobError(BaseModel):
    message: str
    code: str


class IngestJob(BaseModel):
    """An upload's ingest; added/updated/unchanged list document sources as GET /v1/knowledge/documents does."""

    id: str
    object: Literal["knowledge.ingest_job"] = "knowledge.ingest_job"
    status: Literal["queued", "running", "succeeded", "failed"] = "queued"
    files: list[str]  # the names the files are stored under
    created_at: int
    finished_at: int | None = None
    added: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    failed: list[FileFailure] = Field(default_factory=list)
    chunks: int = 0
    error: JobError | None = None


class KnowledgeWriter:
    def __init__(self, max_pending: int, foreground: Foreground | None = None):
        """`foreground`: the interactive requests an ingest yields to between its steps."""
        self.max_pending = max_pending
        self._foreground = foreground
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kb-writer")
        self._jobs: dict[str, IngestJob] = {}  # insertion order = age
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # set by close: the running ingest stops at its next checkpoint
        self._fill: Callable[[Callable[[], None]], tuple[int, int]] | None = None  # keep_filling
        self._waiting = 0  # KB writes submitted and not yet started (`_write`): a fill gives the thread up

    def get(self, job_id: str) -> IngestJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def submit_ingest(self, kb: KnowledgeBase, staged: list[tuple[Path, str]],
                      refused: Sequence[FileFailure] = ()) -> IngestJob:
        """Queue the ingest of staged uploads ((staged file, name) pairs) beside the upload's files
        refused before staging (they are reported as failed); 429 past max_pending jobs."""
        with self._lock:
            pending = sum(j.status in ("queued", "running") for j in self._jobs.values())
            if pending >= self.max_pending:
                raise APIError(429, f"{pending} uploads are waiting to be ingested; retry later", "overloaded",
                               type_="server_busy", headers={"Retry-After": "5"})
            job = IngestJob(id=f"kbjob-{uuid.uuid4().hex[:24]}",
                            files=[name for _, name in staged] + [f.file for f in refused],
                            created_at=int(time.time()), failed=list(refused))
            self._jobs[job.id] = job
            finished = [i for i, j in self._jobs.items() if j.finished_at is not None]
            for old in finished[:max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old]
        self._write(self._run, job, kb, staged)
        return job

    async def run(self, fn: Callable[..., T], *args) -> T:
        """Run another KB write (a delete) on the writer thread, after the jobs queued before it."""
        return await asyncio.wrap_future(self._write(fn, *args))

    def _write(self, fn: Callable[..., T], *args):
        """Submit a KB write; until it starts, a running fill gives the thread up at its next
        checkpoint, and after it the fill goes on (with an ingest's new passages)."""
        def started():
            with self._lock:
                self._waiting -= 1
            try:
                return fn(*args)
            finally:
                self.refill()

        with self._lock:
            self._waiting += 1
        return self._pool.submit(started)

    def keep_filling(self, fill: Callable[[Callable[[], None]], tuple[int, int]]) -> None:
        """Run `fill(checkpoint)` on the writer thread now and after every KB write: work that
        follows the KB's contents; at each checkpoint it waits for a quiet spell without questions,
        and stops there for a waiting write (it runs again after it) or a closing server. It
        returns (computed, already kept), for the log."""
        self._fill = fill
        self.refill()

    def refill(self) -> None:
        """Run the fill again (what it keeps has grown: another answer style is in use)."""
        if self._fill is None or self._stopping.is_set():
            return
        try:
            self._pool.submit(self._run_fill)
        except RuntimeError:  # closed meanwhile
            pass

    def _fill_checkpoint(self) -> None:
        """Between a fill's passages: wait for a quiet spell of FILL_IDLE_S without questions; give
        the thread up to a waiting KB write (after an ingest the fill runs again) or a closing server."""
        if self._foreground is not None:
            self._foreground.wait_idle(self._stopping, FILL_IDLE_S, give_way=lambda: self._waiting > 0)
        if self._stopping.is_set() or self._waiting:
            raise IngestCancelled("the fill gives way")

    def _run_fill(self) -> None:
        started = time.monotonic()
        try:
            computed, kept = self._fill(self._fill_checkpoint)
        except IngestCancelled:
            return
        except Exception:  # the rows are an optimisation: answers go on computing them on first use
            log.exception("keeping passage rows in the background failed")
            return
        if computed:
            log.info("kept passage rows: %d computed in %.0f s, %d kept before", computed,
                     time.monotonic() - started, kept)

    def close(self) -> None:
        """Drop the queued jobs (their staged files are cleared at the next start) and stop the running
        ingest at its next checkpoint; returns once it has, the KB whole."""
        self._stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _checkpoint(self) -> None:
        """Between an ingest's steps: stop when closing, else let answers and searches go first."""
        if self._foreground is not None:
            self._foreground.wait_quiet(self._stopping)
        if self._stopping.is_set():
            raise IngestCancelled("the server is stopping")

    def _set(self, job: IngestJob, **changes) -> IngestJob:
        # a new object per change: a reader never sees a half-updated job
        with self._lock:
            job = self._jobs[job.id] = job.model_copy(update=changes)
        return job

    def _run(self, job: IngestJob, kb: KnowledgeBase, staged: list[tuple[Path, str]]) -> None:
        job = self._set(job, status="running")
        result = {"added": [], "updated": [], "unchanged": [], "failed": list(job.failed), "chunks": 0}
        error = None
        internal = False
        try:
            for path, name in staged:  # one file's failure, whatever it is, never drops the others
                try:
                    report = ingest_staged(kb, path, name, self._checkpoint)
                except IngestCancelled:
                    result["failed"].append(FileFailure(file=name, reason="the server stopped during its ingest"))
                    break
                except KnowledgeError as e:
                    result["failed"].append(FileFailure(file=name, reason=getattr(e, "reason", str(e))))
                    continue
                except Exception:
                    log.exception("ingest job %s: %s failed", job.id, name)
                    result["failed"].append(FileFailure(file=name, reason="internal error; see the server log"))
                    internal = True
                    continue
                for key in ("added", "updated", "unchanged"):
                    result[key] += getattr(report, key)
                result["failed"] += [FileFailure(file=name, reason=reason) for _, reason in report.failed]
                result["failed"] += [FileFailure(file=name, reason="no text to index") for _ in report.empty]
                result["chunks"] += report.chunks
            if result["failed"]:
                error = JobError(message="; ".join(f"{f.file}: {f.reason}" for f in result["failed"]),
                                 code="internal_error" if internal else "ingest_failed")
        finally:
            for path, _ in staged:  # what was not promoted
                path.unlink(missing_ok=True)
            self._set(job, **result, error=error, status="failed" if error else "succeeded",
                      finished_at=int(time.time()))
