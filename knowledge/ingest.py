"""Ingestion: find files, skip unchanged ones, parse + chunk, embed in batches, write per document.

Each document is committed in its own SQLite transaction, so a crash leaves every document either
at its old or at its new version; the in-memory index follows each commit and is saved at the end
(an index left stale by a crash is caught up from SQLite on the next open)."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from tqdm import tqdm

from knowledge.chunking import Chunk, Chunker
from knowledge.errors import EmptyDocumentError, IngestError
from knowledge.loaders import is_supported, load_document
from knowledge.store import DocumentRecord

if TYPE_CHECKING:
    from runtime.embedder import Embedder

log = logging.getLogger(__name__)
EMBED_BATCH_CHUNKS = 256  # chunks of several small files share embedder batches (no half-empty [B, L] runs)
# chunks embedded between checkpoints: one embedder batch or two, tens of milliseconds of work, so an
# answer or a search that an ingest yields to, or a stop that ends it, waits no longer than that
STEP_CHUNKS = 8
MAX_FILE_BYTES = 64 * 1024 * 1024  # a file is read and parsed whole in memory: bigger ones are refused


class DocumentSink(Protocol):
    """What ingestion needs of the store it writes into (knowledge.kb.KnowledgeBase is one): the
    version stored of a file, the chunker new versions are cut with, and one document committed
    or removed at a time. Ingestion knows no more of the KB, so the KB can import it."""

    @property
    def chunker(self) -> Chunker: ...

    def stored_document(self, source: str) -> DocumentRecord | None: ...

    def stored_vectors(self, document_id: int) -> dict[str, tuple[bytes, bytes | None]]: ...

    def commit_document(self, fields: dict[str, Any], chunks: list[Chunk], vectors: np.ndarray,
                        places: np.ndarray | None = None) -> None: ...

    def list_documents(self) -> list[DocumentRecord]: ...

    def remove_document(self, doc: DocumentRecord) -> None: ...


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    skipped: list[str] = field(default_factory=list)  # files of unsupported types found in folders
    empty: list[str] = field(default_factory=list)  # files with no text to index (a page of links): not failures
    chunks: int = 0  # chunks written
    embedded: int = 0  # chunks embedded now (the rest reused the vector of an identical earlier chunk)
    truncated: int = 0  # chunks longer than the embedder's window (only the start was embedded)
    second_embedded: int = 0  # chunks given the second embedder's vector (KnowledgeBase.embed_second)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def indexed_any(self) -> bool:
        """Whether the KB holds any of the files given, new or as they were."""
        return bool(self.added or self.updated or self.unchanged)

    def summary(self) -> str:
        parts = [f"{len(self.added)} added", f"{len(self.updated)} updated", f"{len(self.unchanged)} unchanged",
                 f"{len(self.deleted)} deleted", f"{len(self.failed)} failed"] + (
                     [f"{len(self.empty)} without text"] if self.empty else [])
        rate = f", {self.embedded / self.seconds:.0f} chunks/s" if self.embedded and self.seconds else ""
        second = f", {self.second_embedded} by the second embedder" if self.second_embedded else ""
        return (f"{', '.join(parts)}; {self.chunks} chunks written ({self.embedded} embedded{rate}{second}) "
                f"in {self.seconds:.1f}s")

    def to_dict(self) -> dict:
        return {"added": self.added, "updated": self.updated, "unchanged": self.unchanged, "deleted": self.deleted,
                "failed": [{"path": p, "reason": r} for p, r in self.failed], "skipped": self.skipped, "empty": self.empty,
                "chunks": self.chunks, "embedded": self.embedded, "second_embedded": self.second_embedded,
                "truncated": self.truncated,
                "seconds": round(self.seconds, 3)}


@dataclass
class _Pending:
    fields: dict  # the documents row
    chunks: list[Chunk]
    # chunk hash -> (vector, place vector) blobs of the previous version; the hash covers the place
    # text, and a version from before places were stored has another hash
    reusable: dict[str, tuple[bytes, bytes | None]]
    is_update: bool
    vectors: np.ndarray | None = None
    places: np.ndarray | None = None


def _hidden(parts: tuple[str, ...]) -> bool:
    return any(p.startswith(".") for p in parts)


def discover(paths: list[str | Path], exclude: Path | None = None):
    """(files as (resolved path, display name), folder roots, failures, unsupported files)."""
    files: dict[Path, str] = {}
    roots: list[Path] = []
    failed: list[tuple[str, str]] = []
    skipped: list[str] = []
    for given in paths:
        p = Path(given).expanduser()
        if p.is_dir():
            root = p.resolve()
            roots.append(root)
            for dirpath, dirnames, filenames in os.walk(root):  # symlinked folders are not followed
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for fname in sorted(filenames):
                    f = Path(dirpath) / fname
                    if fname.startswith(".") or (exclude and f.resolve().is_relative_to(exclude)):
                        continue
                    if is_supported(f):
                        files.setdefault(f.resolve(), f.relative_to(root).as_posix())
                    else:
                        skipped.append(str(f))
        elif p.exists():  # a FIFO or device too: read_regular() refuses it with the reason
            files.setdefault(p.resolve(), p.name)
        else:
            failed.append((str(given), "no such file or directory"))
    return list(files.items()), roots, failed, skipped


def read_regular(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes and stat of a regular file of at most `limit` bytes, else IngestError.

    Checked on the opened descriptor (opened non-blocking), so a FIFO never hangs the read, a
    device such as /dev/zero never fills memory, and a file swapped after a check cannot slip by."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise IngestError(path, e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IngestError(path, "not a regular file")
        data = b"" if info.st_size > limit else f.read(limit + 1)  # (it may have grown since fstat)
    if max(info.st_size, len(data)) > limit:
        raise IngestError(path, f"larger than the {limit} byte limit")
    return data, info


Checkpoint = Callable[[], None]  # called between steps; it may block (yield) or raise IngestCancelled (stop)


def _prepare(kb: DocumentSink, path: Path, name: str, max_bytes: int, checkpoint: Checkpoint) -> _Pending | None:
    """Read, hash and (if new or changed) parse and chunk one file; None when it is unchanged."""
    data, info = read_regular(path, max_bytes)
    content_hash = hashlib.sha256(data).hexdigest()
    existing = kb.stored_document(str(path))
    chunker = kb.chunker
    if existing and existing.content_hash == content_hash and existing.chunker == chunker.signature:
        return None
    doc = load_document(path, data)
    chunks = chunker.chunk(doc, between=checkpoint)
    if not chunks:
        raise EmptyDocumentError(path)
    fields = {"source": str(path), "name": name, "kind": doc.kind, "title": doc.title, "content_hash": content_hash,
              "chunker": chunker.signature, "size": len(data), "mtime": info.st_mtime, "text": doc.text}
    reusable = kb.stored_vectors(existing.id) if existing else {}
    return _Pending(fields, chunks, reusable, existing is not None)


def place_vectors(embedder, places: list[str], vectors: np.ndarray) -> np.ndarray:
    """Each chunk's place vector (chunking.place_text): its place embedded, each distinct text once
    (a section's windows share one), or the chunk's own vector for a text with neither title nor
    heading, which is placed by its own words. `vectors`: the chunks' own vectors, in order."""
    named = list(dict.fromkeys(p for p in places if p))
    embedded = dict(zip(named, embedder.embed(named).vectors)) if named else {}
    out = np.array(vectors, np.float32, copy=True)
    for i, place in enumerate(places):
        if place:
            out[i] = embedded[place]
    return out


def _flush(kb: DocumentSink, embedder: Embedder, pending: list[_Pending], report: IngestReport,
           checkpoint: Checkpoint) -> None:
    """Embed what the pending documents need (in shared batches), then commit them one by one, with a
    checkpoint between embedder calls and commits: a document is committed whole or not at all."""
    todo = [(p, i, c.embed_text) for p in pending for i, c in enumerate(p.chunks) if c.hash not in p.reusable]
    for p in pending:
        p.vectors = np.zeros((len(p.chunks), embedder.dim), np.float32)
        for i, c in enumerate(p.chunks):
            if c.hash in p.reusable:
                p.vectors[i] = np.frombuffer(p.reusable[c.hash][0], "<f4")
    for start in range(0, len(todo), STEP_CHUNKS):
        checkpoint()
        part = todo[start:start + STEP_CHUNKS]
        embedded = embedder.embed([t for _, _, t in part])
        for (p, i, _), v, cut in zip(part, embedded.vectors, embedded.truncated):
            p.vectors[i] = v
            report.truncated += cut
    report.embedded += len(todo)
    checkpoint()
    # places: reused with their chunk's vector where the previous version has them, else embedded
    # (in one batch over the pending documents)
    fresh = [(p, i) for p in pending for i, c in enumerate(p.chunks) if p.reusable.get(c.hash, (None, None))[1] is None]
    own = np.array([p.vectors[i] for p, i in fresh], np.float32).reshape(len(fresh), embedder.dim)
    for p in pending:
        p.places = np.zeros_like(p.vectors)
        for i, c in enumerate(p.chunks):
            reused = p.reusable.get(c.hash, (None, None))[1]
            if reused is not None:
                p.places[i] = np.frombuffer(reused, "<f4")
    for (p, i), v in zip(fresh, place_vectors(embedder, [p.chunks[i].place for p, i in fresh], own)):
        p.places[i] = v
    for p in pending:
        checkpoint()
        kb.commit_document(p.fields, p.chunks, p.vectors, p.places)
        (report.updated if p.is_update else report.added).append(p.fields["source"])
        report.chunks += len(p.chunks)


def run_ingest(kb: DocumentSink, embedder: Embedder, paths: list[str | Path], progress: bool = True,
               prune: bool = True, max_file_bytes: int = MAX_FILE_BYTES, exclude: Path | None = None,
               checkpoint: Checkpoint | None = None) -> IngestReport:
    """Ingest `paths` into `kb`, embedding with `embedder` (the one the KB was bound to); files
    under `exclude` (the KB's own folder) are never read. `checkpoint` runs between steps."""
    started = time.perf_counter()
    checkpoint = checkpoint or (lambda: None)
    report = IngestReport()
    files, roots, report.failed, report.skipped = discover(paths, exclude=exclude)
    pending: list[_Pending] = []
    size = 0
    bar = tqdm(files, unit="file", disable=not progress or len(files) < 2, desc="ingest", leave=False)
    for path, name in bar:
        checkpoint()
        try:
            item = _prepare(kb, path, name, max_file_bytes, checkpoint)
        except EmptyDocumentError as e:  # as with a failure, an earlier version of the file stays
            log.warning("skipped %s: no text to index", e.path)
            report.empty.append(e.path)
            continue
        except IngestError as e:
            log.debug("skipped %s", e)  # the report carries it (the CLI prints one line per failure)
            report.failed.append((e.path, e.reason))
            continue
        if item is None:
            report.unchanged.append(str(path))
            continue
        pending.append(item)
        size += sum(c.hash not in item.reusable for c in item.chunks)
        if size >= EMBED_BATCH_CHUNKS:
            _flush(kb, embedder, pending, report, checkpoint)
            pending, size = [], 0
    _flush(kb, embedder, pending, report, checkpoint)
    if prune:  # files that disappeared from an ingested folder leave the KB too
        seen = {str(p) for p, _ in files}
        for doc in kb.list_documents():
            under = any(Path(doc.source).is_relative_to(root) for root in roots)
            if under and doc.source not in seen and not Path(doc.source).exists():
                kb.remove_document(doc)
                report.deleted.append(doc.source)
    report.seconds = time.perf_counter() - started
    return report
