"""What a KB directory holds on disk, read from outside without changing anything: the state another
process left behind (a crash, a writer still running). Nothing here creates a schema, catches an
index up or takes a lock, so it can look at a KB while a server and an ingest both use it."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from knowledge import index as vindex
from knowledge.store import BIGRAM_CHUNKS, BIGRAM_TABLE, FTS_TABLES, sql_functions

DB_FILE, INDEX_FILE = "kb.sqlite", "index.faiss"  # KnowledgeBase's layout


@dataclass
class DiskState:
    documents: int = 0
    chunks: int = 0
    embeddings: int = 0
    fts_rows: dict[str, int] = field(default_factory=dict)  # per FTS table: rows its index holds
    cjk_chunks: int = 0  # chunks with CJK text: the rows the bigram index must hold
    bigram_rows: int = 0  # rows the bigram index holds
    generation: int = 0  # the KB generation SQLite is at
    index_count: int | None = None  # vectors in index.faiss per its sidecar (None: no sidecar)
    index_generation: int | None = None  # the KB generation the saved index reflects
    index_error: str | None = None  # why index.faiss does not load as its sidecar describes, if it does not
    temp_files: list[str] = field(default_factory=list)  # a killed writer's unfinished files

    @property
    def agree(self) -> bool:
        """SQLite's chunks, their vectors, the FTS indexes and the saved vector index hold the same count,
        and the bigram index one row for each chunk with CJK text."""
        return (self.index_error is None and self.chunks == self.embeddings == self.index_count
                and all(n == self.chunks for n in self.fts_rows.values()) and self.bigram_rows == self.cjk_chunks)

    def counts(self) -> str:
        fts = "/".join(str(n) for n in self.fts_rows.values())
        return (f"{self.chunks} chunks, {self.embeddings} vectors, FTS {fts}, bigram {self.bigram_rows} of "
                f"{self.cjk_chunks}, index {self.index_count}")


def read_disk_state(kb_dir: Path, load_index: bool = True) -> DiskState:
    """The counts SQLite has committed and what the saved index holds. A KB whose schema is not there
    yet, or whose database is busy past a second, reads as empty; `load_index` also loads index.faiss
    and checks it against its sidecar (its checksum and ids)."""
    state = DiskState()
    db = kb_dir / DB_FILE
    if db.exists():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
                q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
                state.documents, state.chunks = q("SELECT count(*) FROM documents"), q("SELECT count(*) FROM chunks")
                state.embeddings = q("SELECT count(*) FROM embeddings")
                state.fts_rows = {t: q(f"SELECT count(*) FROM {t}_docsize") for t in FTS_TABLES}
                sql_functions(con)  # the chunks the bigram index holds, decided as its triggers decide
                state.cjk_chunks = q(f"SELECT count(*) FROM chunks WHERE {BIGRAM_CHUNKS}")
                state.bigram_rows = q(f"SELECT count(*) FROM {BIGRAM_TABLE}_docsize")
                state.generation = int(q("SELECT coalesce(max(value), 0) FROM meta WHERE key = 'generation'"))
        except sqlite3.OperationalError:  # schema not created yet, or busy
            pass
    path = kb_dir / INDEX_FILE
    try:
        sidecar = vindex.read_sidecar(path)
        state.index_count, state.index_generation = sidecar.get("count"), sidecar.get("generation")
        if load_index:
            vindex.load_index(path, sidecar)
    except vindex.IndexFileError as e:
        state.index_error = str(e)
    state.temp_files = sorted(p.name for p in kb_dir.glob(".index.*.tmp"))
    return state
