"""The fault half of the soak: SIGKILL of `hexrag ingest` while a server reads the same KB, and of
the server itself during uploads, at random moments and at the moments the vector index file or its
sidecar is being written.

A kill is judged by what comes after it: the next start of a process on the KB works (the ingest
resumes to completion, the server comes up and takes the upload again), SQLite's chunks, both FTS
indexes and the saved FAISS index then hold the same count, `KnowledgeBase.check()` passes, and a
fixed query set returns the same top hits, through the library and through the server, as a KB into
which the same files were ingested without interruption."""

from __future__ import annotations

import ctypes
import os
import random
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel

from app.bench.server import Server, follow_job
from knowledge import KnowledgeBase, UnknownDocumentError
from knowledge.disk import DB_FILE, INDEX_FILE, read_disk_state

# where a kill is aimed, in turn: half at random moments, the rest inside the two index-file writes
KILL_POINTS = ("random", "index-write", "random", "sidecar-write")
MAX_ATTEMPTS = 8  # a kill that missed its aimed-at write is tried again; the last miss is reported as such
MODES = {"hybrid": -1.0, "dense": -1.0, "bm25": None}  # mode -> min_score (-1: no answerability gate)
K = 5
UPLOAD_BATCH = 10  # files per upload request
IN_CREATE, IN_MOVED_TO = 0x100, 0x80


class KillTrial(BaseModel):
    n: int
    aimed_at: str  # random | index-write | sidecar-write
    landed: str  # where the kill landed: index-write, sidecar-write or the ingest's progress
    at_s: float | None  # None: not killed; seconds after the victim started (ingest) or the first upload was sent (server)
    attempts: int  # kills tried; more than one when the victim finished before the aimed-at write
    at_kill: str  # what the disk held right after the kill
    at_kill_agree: bool  # whether the counts agreed already (a lagging index is caught up at the next start)
    rebuilt: str | None  # why the next open rebuilt the vector index instead of catching it up, if it did
    restart_ok: bool  # the next process start worked (resumed ingest / restarted server and re-upload)
    counts_agree: bool  # chunks = vectors = FTS rows = saved index vectors, after the next start
    check_ok: bool  # KnowledgeBase.check() after the next start
    same_hits: bool  # the query set's top hits equal the uninterrupted ingest's (library and server)
    server_errors: int  # failed reads of the server while the ingest ran and was killed
    problems: list[str]

    @property
    def consistent(self) -> bool:
        return not self.problems


class KillReport(BaseModel):
    victim: Literal["ingest", "server"]
    files: int  # files the victim was ingesting
    reference_s: float  # the same work uninterrupted (seconds)
    queries: int  # (query, mode) pairs compared
    trials: list[KillTrial]
    consistent: int
    landed_in_index_write: int
    landed_in_sidecar_write: int
    missed: int  # kills that missed the write they were aimed at (tried again)


# ---- kill points ------------------------------------------------------------------------------
class _CreateWatch:
    """Files created in (or renamed into) one folder, from inotify: a kill lands within a fraction of a
    millisecond of the victim creating the file, well inside a write and its fsync."""

    def __init__(self, folder: Path):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), "inotify is not available")

    def wait(self, name: str, alive: Callable[[], bool]) -> bool:
        """True once `name` is created; False when the victim ended first."""
        target = os.fsencode(name)
        while alive():
            if not select.select([self.fd], [], [], 0.05)[0]:
                continue
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            offset = 0
            while offset < len(data):
                _, _, _, length = struct.unpack_from("iIII", data, offset)
                if data[offset + 16:offset + 16 + length].rstrip(b"\0") == target:
                    return True
                offset += 16 + length
        return False

    def close(self) -> None:
        os.close(self.fd)


def _temp_name(point: str, pid: int) -> str:
    """The temporary file knowledge.index writes before it renames it into place."""
    name = INDEX_FILE if point == "index-write" else "index.json"
    return f".{name}.{pid}.tmp"


def _kill_at(proc: subprocess.Popen, point: str, share: float, window_s: float, watch: _CreateWatch,
             busy: Callable[[], bool] = lambda: True, begun: Callable[[], bool] = lambda: True) -> float | None:
    """SIGKILL the victim at its aimed-at point: seconds after the call, or None when it ended (or,
    per `busy`, finished its work) first. A random kill waits until the work has `begun`, then lands
    `share` of the way through what is left of `window_s` (the same work's uninterrupted duration)."""
    started = time.perf_counter()
    alive = lambda: proc.poll() is None and busy()  # noqa: E731
    if point == "random":
        while alive() and not begun():
            time.sleep(0.01)
        begun_s = time.perf_counter() - started
        at_s = begun_s + share * max(0.5, window_s - begun_s)
        while alive() and time.perf_counter() - started < at_s:
            time.sleep(0.002)
    elif not watch.wait(_temp_name(point, proc.pid), alive):
        return None
    if not alive():
        return None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.perf_counter() - started


def _landed(kb_dir: Path, pid: int, committed: int, files: int, killed: bool = True) -> str:
    if not killed:
        return "not killed: the victim finished first"
    for point in ("index-write", "sidecar-write"):
        if (kb_dir / _temp_name(point, pid)).exists():  # a killed writer never removes its temp file
            return point
    if committed == 0:
        return "before the first commit"
    return "after the last commit" if committed >= files else f"mid-ingest ({committed}/{files} documents)"


def after(at: float | None) -> str:
    return "" if at is None else f" after {at:.2f}s"


def _on_target(point: str, landed: str) -> bool:
    """A kill aimed at a write must land inside it: on a loaded machine a small write can finish
    between the victim creating its temp file and the SIGKILL arriving."""
    return point == "random" and not landed.startswith("not killed") or landed == point


# ---- KB copies and the reference hits ----------------------------------------------------------
def copy_kb(src: Path, dest: Path) -> None:
    """A consistent copy of a KB another process may have open: SQLite through its backup API, the
    vector index as files (the next open catches it up or rebuilds it)."""
    dest.mkdir(parents=True)
    with closing(sqlite3.connect(f"file:{src / DB_FILE}?mode=ro", uri=True)) as a, \
            closing(sqlite3.connect(dest / DB_FILE)) as b:
        a.backup(b)
    for name in (INDEX_FILE, "index.json"):
        if (src / name).exists():
            shutil.copy2(src / name, dest / name)


def fault_queries(files: list[Path], extra: list[str]) -> list[str]:
    """A few questions about the KB and the opening words of paragraphs of the generated files."""
    out = list(extra)
    for path in files[1:len(files):max(1, len(files) // 4)][:4]:
        paragraphs = [p for p in path.read_text().split("\n\n") if not p.startswith("#")]
        out.append(" ".join(paragraphs[len(paragraphs) // 2].split()[:8]))
    return out


Hits = dict[str, list[tuple[str, str, str]]]


def library_hits(kb_dir: Path, embedder, queries: list[str]) -> Hits:
    with KnowledgeBase.open(kb_dir, embedder) as kb:
        return {f"{mode}: {q}": [(h.name, h.heading, h.text) for h in kb.search(q, k=K, mode=mode, min_score=score)]
                for q in queries for mode, score in MODES.items()}


def server_hits(url: str, queries: list[str]) -> Hits:
    out: Hits = {}
    for q in queries:
        for mode, score in MODES.items():
            r = httpx.post(url + "/v1/knowledge/search", json={"query": q, "k": K, "mode": mode, "min_score": score},
                           timeout=60)
            r.raise_for_status()
            out[f"{mode}: {q}"] = [(d["source"], d["heading"], d["text"]) for d in r.json()["data"]]
    return out


def _differences(got: Hits, want: Hits, where: str) -> list[str]:
    bad = [key for key in want if got.get(key) != want[key]]
    return [f"{where}: top hits differ for {len(bad)} of {len(want)} queries (first: {bad[0]!r})"] if bad else []


def _after_start(kb_dir: Path, embedder, problems: list[str], settled: bool = False) -> tuple[str | None, bool, bool]:
    """Open the KB as the next process would; (rebuild reason, counts agree, check passed). `settled`:
    the work was done again since the kill, so no killed write may have left a temporary file."""
    with KnowledgeBase.open(kb_dir, embedder) as kb:
        rebuilt, check = kb.last_rebuild_reason, kb.check()
    state = read_disk_state(kb_dir)
    if not state.agree:
        problems.append(f"counts disagree after the next start: {state.counts()} ({state.index_error or 'index ok'})")
    if not check.ok:
        problems.append(f"check failed: {'; '.join(check.problems)}")
    if settled and state.temp_files:
        problems.append(f"temporary files of killed index writes left: {', '.join(state.temp_files)}")
    return rebuilt, state.agree, check.ok


class _Reader(threading.Thread):
    """Searches the server while a trial runs; counts the reads that fail."""

    def __init__(self, url: str, queries: list[str]):
        super().__init__(daemon=True)
        self.url, self.queries, self.errors = url, queries, 0
        self.first_error: str | None = None
        self.stop = threading.Event()

    def _failed(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                r = httpx.post(self.url + "/v1/knowledge/search", json={"query": self.queries[n % len(self.queries)],
                                                                        "k": K, "mode": "hybrid"}, timeout=30)
                if r.status_code != 200:
                    self._failed(f"{r.status_code} {r.text[:120]}")
            except httpx.HTTPError as e:
                self._failed(f"{type(e).__name__}: {e}")
            n += 1
            self.stop.wait(0.2)


# ---- (a) SIGKILL of `hexrag ingest` while a server reads the same KB ------------------------------
def _ingest_cmd(folder: Path, kb_dir: Path, embedder_dir: Path) -> list[str]:
    return [sys.executable, "-m", "app.cli", "ingest", str(folder), "--kb", str(kb_dir), "--embedder", str(embedder_dir),
            "--quiet"]


def _forget(kb_dir: Path, embedder, sources: list[str]) -> None:
    with KnowledgeBase.open(kb_dir, embedder) as kb:
        for source in sources:
            try:
                kb.delete(source)
            except UnknownDocumentError:
                pass


def ingest_kill_trials(kb_dir: Path, folder: Path, work: Path, embedder, embedder_dir: Path, server_url: str,
                       trials: int, queries: list[str], rng: random.Random,
                       progress: Callable[[str], None]) -> KillReport:
    files = sorted(folder.glob("*.md"))
    reference = work / "reference_ingest"
    copy_kb(kb_dir, reference)
    started = time.perf_counter()
    subprocess.run(_ingest_cmd(folder, reference, embedder_dir), check=True, capture_output=True)
    reference_s = time.perf_counter() - started
    want = library_hits(reference, embedder, queries)
    log = open(work / "ingest_trials.log", "ab")
    out: list[KillTrial] = []
    missed = 0
    try:
        for n in range(trials):
            point = KILL_POINTS[n % len(KILL_POINTS)]
            _forget(kb_dir, embedder, [str(folder.resolve())])
            before = read_disk_state(kb_dir, load_index=False).documents
            reader = _Reader(server_url, queries)
            reader.start()
            for attempt in range(1, MAX_ATTEMPTS + 1):
                watch = _CreateWatch(kb_dir)
                try:
                    proc = subprocess.Popen(_ingest_cmd(folder, kb_dir, embedder_dir), stdout=log, stderr=log)
                    committed = lambda: read_disk_state(kb_dir, load_index=False).documents > before  # noqa: E731
                    at = _kill_at(proc, point, rng.random(), reference_s, watch, begun=committed)
                finally:
                    watch.close()
                proc.wait()
                at_kill = read_disk_state(kb_dir)
                # before the next start cleans up a killed writer's temp file
                landed = _landed(kb_dir, proc.pid, at_kill.documents - before, len(files), killed=at is not None)
                if _on_target(point, landed) or attempt == MAX_ATTEMPTS:
                    break
                missed += 1
                _forget(kb_dir, embedder, [str(folder.resolve())])
            reader.stop.set()
            reader.join()
            problems: list[str] = []
            rebuilt, _, _ = _after_start(kb_dir, embedder, problems)
            resumed = subprocess.run(_ingest_cmd(folder, kb_dir, embedder_dir), capture_output=True, text=True)
            if resumed.returncode != 0:
                problems.append(f"the resumed ingest failed ({resumed.returncode}): {resumed.stderr.strip()[-300:]}")
            _, agree, check_ok = _after_start(kb_dir, embedder, problems, settled=True)
            problems += _differences(library_hits(kb_dir, embedder, queries), want, "library")
            problems += _differences(server_hits(server_url, queries), want, "server")
            if reader.errors:
                problems.append(f"{reader.errors} server reads failed during the trial (first: {reader.first_error})")
            trial = KillTrial(n=n, aimed_at=point, landed=landed, at_s=at, attempts=attempt, at_kill=at_kill.counts(),
                              at_kill_agree=at_kill.agree, rebuilt=rebuilt, restart_ok=resumed.returncode == 0, counts_agree=agree,
                              check_ok=check_ok, same_hits=not any("top hits" in p for p in problems),
                              server_errors=reader.errors, problems=problems)
            out.append(trial)
            progress(f"ingest kill {n + 1}/{trials}: {trial.landed}{after(at)}: "
                     f"{'consistent' if trial.consistent else '; '.join(problems)}")
    finally:
        log.close()
    return _report("ingest", len(files), reference_s, len(want), out, missed)


# ---- (b) SIGKILL of the server during uploads -----------------------------------------------------
class _Uploader(threading.Thread):
    """Uploads files in batches, then follows the jobs, until done or the server is gone."""

    def __init__(self, url: str, files: list[Path]):
        super().__init__(daemon=True)
        self.url, self.files = url, files
        self.jobs: list[dict] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=120) as client:
                for start in range(0, len(self.files), UPLOAD_BATCH):
                    batch = [("files", (f.name, f.read_bytes(), "text/markdown"))
                             for f in self.files[start:start + UPLOAD_BATCH]]
                    r = client.post("/v1/knowledge/documents", files=batch)
                    if r.status_code != 202:
                        self.error = f"upload answered {r.status_code}: {r.text[:200]}"
                        return
                    self.jobs.append(r.json())
                self.jobs = [follow_job(client, job) for job in self.jobs]
        except httpx.HTTPError as e:
            self.error = f"{type(e).__name__}: {e}"


def upload_all(url: str, files: list[Path]) -> list[dict]:
    up = _Uploader(url, files)
    up.run()
    if up.error:
        raise RuntimeError(up.error)
    return up.jobs


def server_kill_trials(server: Server, start_server: Callable[[], Server], kb_dir: Path, folder: Path, work: Path,
                       embedder, trials: int, queries: list[str], rng: random.Random,
                       progress: Callable[[str], None]) -> tuple[KillReport, Server]:
    """`server` serves kb_dir and is the first victim; `start_server()` starts the next one. Returns the
    report and the server left running."""
    files = sorted(folder.glob("*.md"))
    uploaded = [str((kb_dir / "uploads" / f.name).resolve()) for f in files]
    reference = work / "reference_upload"
    copy_kb(kb_dir, reference)
    with KnowledgeBase.open(reference, embedder) as kb:
        kb.ingest(folder, progress=False)
    want = library_hits(reference, embedder, queries)
    started = time.perf_counter()
    upload_all(server.url, files)  # the same work uninterrupted: how long a trial's window is
    reference_s = time.perf_counter() - started
    out: list[KillTrial] = []
    missed = 0
    for n in range(trials):
        point = KILL_POINTS[n % len(KILL_POINTS)]
        for attempt in range(1, MAX_ATTEMPTS + 1):
            _forget(kb_dir, embedder, uploaded)
            before = read_disk_state(kb_dir, load_index=False).documents
            watch = _CreateWatch(kb_dir)
            try:
                uploader = _Uploader(server.url, files)
                uploader.start()
                at = _kill_at(server.proc, point, rng.random(), reference_s, watch, busy=uploader.is_alive)
            finally:
                watch.close()
            uploader.join()
            server.kill()  # reaps it and closes its log (a victim that finished its uploads first ends here)
            at_kill = read_disk_state(kb_dir)
            landed = _landed(kb_dir, server.pid, at_kill.documents - before, len(files), killed=at is not None)
            if _on_target(point, landed) or attempt == MAX_ATTEMPTS:
                break
            missed += 1
            server = start_server()  # the next attempt's victim
            server.wait_ready()
        problems: list[str] = []
        server = start_server()
        try:
            server.wait_ready()
            jobs = upload_all(server.url, files)
            failed = [j for j in jobs if j["status"] != "succeeded"]
            restart_ok = not failed
            if failed:
                problems.append(f"re-upload after the restart: {len(failed)} jobs failed: {failed[0].get('error')}")
        except (RuntimeError, TimeoutError) as e:
            restart_ok = False
            problems.append(f"the restarted server did not take the uploads: {str(e)[-300:]}")
        rebuilt, agree, check_ok = _after_start(kb_dir, embedder, problems, settled=restart_ok)
        problems += _differences(library_hits(kb_dir, embedder, queries), want, "library")
        if restart_ok:
            problems += _differences(server_hits(server.url, queries), want, "server")
        trial = KillTrial(n=n, aimed_at=point, landed=landed, at_s=at, attempts=attempt, at_kill=at_kill.counts(),
                          at_kill_agree=at_kill.agree, rebuilt=rebuilt, restart_ok=restart_ok, counts_agree=agree,
                          check_ok=check_ok, same_hits=not any("top hits" in p for p in problems), server_errors=0,
                          problems=problems)
        out.append(trial)
        progress(f"server kill {n + 1}/{trials}: {trial.landed}{after(at)}: "
                 f"{'consistent' if trial.consistent else '; '.join(problems)}")
    return _report("server", len(files), reference_s, len(want), out, missed), server


def _report(victim, files: int, reference_s: float, queries: int, trials: list[KillTrial], missed: int) -> KillReport:
    return KillReport(victim=victim, files=files, reference_s=reference_s, queries=queries, trials=trials,
                      consistent=sum(t.consistent for t in trials),
                      landed_in_index_write=sum(t.landed == "index-write" for t in trials),
                      landed_in_sidecar_write=sum(t.landed == "sidecar-write" for t in trials), missed=missed)
