"""The SQLite source of truth: documents, chunks, their embeddings and three FTS5 indexes.

One integer id everywhere: a chunk's rowid is its FAISS id and its FTS5 rowid. AUTOINCREMENT
keeps rowids from ever being reused, so an index that still holds a deleted chunk's id can never
mistake it for a new chunk. The FTS5 tables are kept in sync by triggers (the word and trigram
indexes read the chunks as external content; the bigram index is contentless), so BM25 cannot
drift from the chunks; every document is written in one transaction.

Every transaction that adds or removes vectors also bumps `meta.generation`: a process holding a
vector index in memory compares one number to learn whether another process changed the KB."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from knowledge.chunking import Chunk
from knowledge.cjk import bigram_text, has_cjk
from knowledge.errors import KnowledgeBaseCorruptError

# 2: the bigram index (a KB of schema 1 gets it when it is opened)
SCHEMA_VERSION = 2
FTS_TABLES = {"chunks_fts": "porter unicode61 remove_diacritics 2",  # words: English stemming, accents folded
              "chunks_fts_cjk": "trigram"}  # substrings: Chinese / Japanese text has no spaces
# Chinese / Japanese bigrams (knowledge/cjk.py) of the chunks with CJK text: what Chinese BM25 ranks by
BIGRAM_TABLE, BIGRAM_TOKENIZER = "chunks_fts_bigram", "unicode61 remove_diacritics 2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL UNIQUE,      -- resolved absolute path: the stable identity of a document
    name TEXT NOT NULL,               -- path relative to the folder it was ingested from (citations)
    kind TEXT NOT NULL,
    title TEXT,
    content_hash TEXT NOT NULL,       -- sha256 of the file bytes: unchanged files are skipped
    chunker TEXT NOT NULL,            -- chunking settings the chunks were made with
    size INTEGER NOT NULL,
    mtime REAL,
    text TEXT NOT NULL,               -- extracted text; chunk offsets index into it
    chunk_count INTEGER NOT NULL,
    ingested_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id),
    ordinal INTEGER NOT NULL,
    heading TEXT NOT NULL DEFAULT '',  -- "Driving > Regenerative braking"
    entry_id TEXT,                     -- FAQ entry id
    text TEXT NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    hash TEXT NOT NULL                 -- sha256 of the embedded text (heading + text)
);
CREATE INDEX IF NOT EXISTS chunks_document ON chunks(document_id, ordinal);
-- a table of its own so re-embedding never touches chunks (and never fires the FTS triggers)
CREATE TABLE IF NOT EXISTS embeddings (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id),
    vector BLOB NOT NULL              -- float32, little-endian, L2-normalised
);
-- a second embedder's vectors (VectorTable SECOND): for the languages the first cannot read, a
-- multilingual model beside an English one. Filled after the chunks are committed (KnowledgeBase
-- .embed_second), so a chunk may lack one for a while; a KB without a second embedder has none.
CREATE TABLE IF NOT EXISTS second_embeddings (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id),
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS second_places (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id),
    vector BLOB NOT NULL
);
-- the embedding of a chunk's place alone (chunking.place_text); hybrid search ranks its candidate
-- sections by it too. KBs written before it have no rows here and are ranked without it.
CREATE TABLE IF NOT EXISTS places (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id),
    vector BLOB NOT NULL
);
"""


def _fts_sql(table: str, tokenize: str) -> str:
    return f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(
    heading, text, content='chunks', content_rowid='id', tokenize='{tokenize}');
CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO {table}(rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO {table}({table}, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
END;
CREATE TRIGGER IF NOT EXISTS {table}_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO {table}({table}, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
    INSERT INTO {table}(rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
"""


# Contentless: the bigram text is made by hexrag_bigram_text, which Store registers on its connection
# (a connection without it cannot change chunks: it fails, it does not drift). Deleting a row means
# giving FTS5 the tokens it was indexed with, so bigram_text may only change with SCHEMA_VERSION.
_BIGRAM_ROW = "hexrag_has_cjk({row}.heading || ' ' || {row}.text)"
# the chunks the bigram index holds, as a WHERE clause over `chunks` (on a connection with sql_functions)
BIGRAM_CHUNKS = _BIGRAM_ROW.format(row="chunks")
_BIGRAM_SQL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {BIGRAM_TABLE} USING fts5(
    heading, text, content='', tokenize='{BIGRAM_TOKENIZER}');
CREATE TRIGGER IF NOT EXISTS {BIGRAM_TABLE}_ai AFTER INSERT ON chunks WHEN {_BIGRAM_ROW.format(row="new")} BEGIN
    INSERT INTO {BIGRAM_TABLE}(rowid, heading, text)
    VALUES (new.id, hexrag_bigram_text(new.heading), hexrag_bigram_text(new.text));
END;
CREATE TRIGGER IF NOT EXISTS {BIGRAM_TABLE}_ad AFTER DELETE ON chunks WHEN {_BIGRAM_ROW.format(row="old")} BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, heading, text)
    VALUES ('delete', old.id, hexrag_bigram_text(old.heading), hexrag_bigram_text(old.text));
END;
CREATE TRIGGER IF NOT EXISTS {BIGRAM_TABLE}_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, heading, text)
    SELECT 'delete', old.id, hexrag_bigram_text(old.heading), hexrag_bigram_text(old.text)
    WHERE {_BIGRAM_ROW.format(row="old")};
    INSERT INTO {BIGRAM_TABLE}(rowid, heading, text)
    SELECT new.id, hexrag_bigram_text(new.heading), hexrag_bigram_text(new.text) WHERE {_BIGRAM_ROW.format(row="new")};
END;
"""


@dataclass(frozen=True)
class VectorTable:
    """Where one embedder's vectors live: the table, and the meta keys naming its model and dimension."""

    name: str
    places: str  # the table of its place vectors (chunking.place_text)
    model_key: str
    dim_key: str


FIRST = VectorTable("embeddings", "places", "model_id", "dim")  # the KB's embedder: every chunk has a vector
SECOND = VectorTable("second_embeddings", "second_places", "second_model_id", "second_dim")


@dataclass
class DocumentRecord:
    id: int
    source: str
    name: str
    kind: str
    title: str | None
    content_hash: str
    chunker: str
    size: int
    mtime: float | None
    chunk_count: int
    ingested_at: str


@dataclass(frozen=True)
class WriteResult:
    """What one committed write did to the vectors, and the KB generation it produced."""
    removed: np.ndarray  # chunk ids
    added: np.ndarray
    generation: int


@dataclass
class ChunkRecord:
    id: int
    document_id: int
    source: str
    name: str
    heading: str
    entry_id: str | None
    text: str
    start: int
    end: int


_DOC_COLUMNS = "id, source, name, kind, title, content_hash, chunker, size, mtime, chunk_count, ingested_at"


def vector_blob(v: np.ndarray) -> bytes:
    return np.asarray(v, "<f4").tobytes()


def sql_functions(conn: sqlite3.Connection) -> None:
    """The functions the bigram index's triggers and BIGRAM_CHUNKS call, registered on a connection."""
    conn.create_function("hexrag_has_cjk", 1, has_cjk, deterministic=True)
    conn.create_function("hexrag_bigram_text", 1, bigram_text, deterministic=True)


class Store:
    def __init__(self, path: Path):
        self.path = path
        self._text_stats: tuple[int, tuple[int, float]] | None = None  # (generation, BM25 statistics)
        try:
            # one connection shared by the threads of a server: KnowledgeBase serialises access with its lock
            self.db = sqlite_utils.Database(sqlite3.connect(path, check_same_thread=False))
            sql_functions(self.db.conn)
            self.db.execute("PRAGMA busy_timeout = 10000")
            self.db.enable_wal()
            # WAL + NORMAL survives a killed process with every committed transaction intact
            self.db.execute("PRAGMA synchronous = NORMAL")
            self._init_schema()
        except sqlite3.DatabaseError as e:
            raise KnowledgeBaseCorruptError(f"{path} is not a usable knowledge base ({e})") from None

    def _init_schema(self) -> None:
        current = str(SCHEMA_VERSION)
        # a schema change takes the write lock before it reads the version: of two processes opening a
        # schema-1 KB, one fills its bigram index and the other finds it filled (not filled twice: a
        # contentless FTS5 table does not refuse a rowid it already holds)
        with self.db.atomic() if self._schema_version() == current else self._writing():
            version = self._schema_version()
            if version is not None and int(version) not in (1, SCHEMA_VERSION):
                raise KnowledgeBaseCorruptError(
                    f"{self.path} has KB schema {version}; this hexrag reads {SCHEMA_VERSION}: re-ingest into a new KB")
            for statement in _split_sql(_SCHEMA + "".join(_fts_sql(t, tok) for t, tok in FTS_TABLES.items())
                                        + _BIGRAM_SQL):
                self.db.execute(statement)
            if version == "1":  # its chunks were written before the bigram index
                self._fill_bigrams()
            if version != current:
                self._set_meta("schema_version", current)

    def _schema_version(self) -> str | None:
        return self.get_meta("schema_version") if self.db["meta"].exists() else None

    def close(self) -> None:
        self.db.close()

    # ---- meta
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        [key, value])

    def set_meta(self, **values: Any) -> None:
        with self.db.atomic():
            for key, value in values.items():
                self._set_meta(key, str(value))

    def delete_meta(self, key: str) -> None:
        with self.db.atomic():
            self.db.execute("DELETE FROM meta WHERE key = ?", [key])

    def generation(self) -> int:
        """Bumped by every committed change to the vectors (in any process): one indexed lookup."""
        return int(self.get_meta("generation") or 0)

    def _bump_generation(self) -> int:
        """Inside the writing transaction, so the new rows and the new generation commit together."""
        generation = self.generation() + 1
        self._set_meta("generation", str(generation))
        return generation

    # ---- documents
    def document(self, source: str) -> DocumentRecord | None:
        row = self.db.execute(f"SELECT {_DOC_COLUMNS} FROM documents WHERE source = ?", [source]).fetchone()
        return DocumentRecord(*row) if row else None

    def documents(self) -> list[DocumentRecord]:
        return [DocumentRecord(*r) for r in self.db.execute(f"SELECT {_DOC_COLUMNS} FROM documents ORDER BY source")]

    def document_text(self, document_id: int) -> str:
        return self.db.execute("SELECT text FROM documents WHERE id = ?", [document_id]).fetchone()[0]

    def section_text(self, document_id: int, heading: str, entry_id: str | None) -> str:
        """The document's text from the section's first chunk to its last (chunks are slices of it)."""
        start, end = self.db.execute("SELECT min(start_char), max(end_char) FROM chunks WHERE document_id = ? "
                                     "AND heading = ? AND entry_id IS ?", [document_id, heading, entry_id]).fetchone()
        if start is None:
            return ""
        return self.db.execute("SELECT substr(text, ?, ?) FROM documents WHERE id = ?",
                               [start + 1, end - start, document_id]).fetchone()[0]

    def section_chunk_ids(self, document_id: int, heading: str, entry_id: str | None) -> list[int]:
        """The section's chunks in document order."""
        rows = self.db.execute("SELECT id FROM chunks WHERE document_id = ? AND heading = ? AND entry_id IS ? "
                               "ORDER BY start_char", [document_id, heading, entry_id])
        return [r[0] for r in rows]

    def chunk_ids_of(self, document_ids: list[int]) -> np.ndarray:
        if not document_ids:
            return np.zeros(0, np.int64)
        rows = self.db.execute(f"SELECT id FROM chunks WHERE document_id IN ({_marks(document_ids)})", document_ids)
        return np.array([r[0] for r in rows], np.int64)

    def vectors_by_hash(self, document_id: int) -> dict[str, tuple[bytes, bytes | None]]:
        """chunk hash -> (vector, place vector: None before places were stored) of a document's chunks,
        for reuse on re-ingest."""
        rows = self.db.execute("SELECT c.hash, e.vector, p.vector FROM chunks c JOIN embeddings e ON e.chunk_id = c.id "
                               "LEFT JOIN places p ON p.chunk_id = c.id WHERE c.document_id = ?", [document_id])
        return {h: (v, place) for h, v, place in rows}

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write transaction that takes SQLite's write lock first (waiting up to busy_timeout).

        A deferred one that reads before it writes fails at once with SQLITE_BUSY when another
        process commits in between (WAL cannot upgrade a stale read snapshot)."""
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.rollback()
            raise
        conn.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One read transaction: every statement inside sees the same commit, whatever other processes
        commit meanwhile (WAL snapshot isolation). A search must not take a chunk id from FTS and then
        miss its row because a delete committed in between."""
        conn = self.db.conn
        if conn.in_transaction:  # inside this process's own write: it sees its own rows already
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")  # nothing was written: this only ends the snapshot

    def replace_document(self, fields: dict[str, Any], chunks: list[Chunk], vectors: np.ndarray,
                         places: np.ndarray | None = None) -> WriteResult:
        """Write one document version atomically; places[i] is chunk i's place vector."""
        conn = self.db.conn
        with self._writing():
            old = conn.execute("SELECT id FROM documents WHERE source = ?", [fields["source"]]).fetchone()
            fields = {**fields, "chunk_count": len(chunks), "ingested_at": _now()}
            if old:
                doc_id = old[0]
                removed = self._delete_chunks(doc_id)
                sets = ", ".join(f"{k} = ?" for k in fields)
                conn.execute(f"UPDATE documents SET {sets} WHERE id = ?", [*fields.values(), doc_id])
            else:
                removed = np.zeros(0, np.int64)
                cols = ", ".join(fields)
                doc_id = conn.execute(f"INSERT INTO documents ({cols}) VALUES ({_marks(fields)})",
                                      list(fields.values())).lastrowid
            new_ids = np.empty(len(chunks), np.int64)
            for i, (c, v) in enumerate(zip(chunks, vectors)):
                new_ids[i] = conn.execute(
                    "INSERT INTO chunks (document_id, ordinal, heading, entry_id, text, start_char, end_char, tokens, hash) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [doc_id, c.ordinal, c.heading_path, c.entry_id, c.text, c.start, c.end, c.tokens, c.hash]).lastrowid
                conn.execute("INSERT INTO embeddings (chunk_id, vector) VALUES (?, ?)", [int(new_ids[i]), vector_blob(v)])
                if places is not None:
                    conn.execute("INSERT INTO places (chunk_id, vector) VALUES (?, ?)",
                                 [int(new_ids[i]), vector_blob(places[i])])
            generation = self._bump_generation()
        return WriteResult(removed, new_ids, generation)

    def delete_document(self, document_id: int) -> WriteResult:
        with self._writing():
            removed = self._delete_chunks(document_id)
            self.db.conn.execute("DELETE FROM documents WHERE id = ?", [document_id])
            generation = self._bump_generation()
        return WriteResult(removed, np.zeros(0, np.int64), generation)

    def _delete_chunks(self, document_id: int) -> np.ndarray:
        conn = self.db.conn
        ids = np.array([r[0] for r in conn.execute("SELECT id FROM chunks WHERE document_id = ?", [document_id])], np.int64)
        for table in (FIRST.name, FIRST.places, SECOND.name, SECOND.places):
            conn.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT id FROM chunks WHERE document_id = ?)",
                         [document_id])
        conn.execute("DELETE FROM chunks WHERE document_id = ?", [document_id])  # triggers update both FTS tables
        return ids

    # ---- chunks and vectors
    def chunks(self, ids: list[int]) -> dict[int, ChunkRecord]:
        out: dict[int, ChunkRecord] = {}
        for start in range(0, len(ids), 900):  # stay under SQLite's bound-parameter limit
            part = [int(i) for i in ids[start:start + 900]]
            rows = self.db.execute(
                "SELECT c.id, c.document_id, d.source, d.name, c.heading, c.entry_id, c.text, c.start_char, c.end_char "
                f"FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id IN ({_marks(part)})", part)
            out.update({r[0]: ChunkRecord(*r) for r in rows})
        return out

    def vectors(self, ids: np.ndarray, dim: int, table: VectorTable = FIRST) -> np.ndarray:
        """Vectors of the given chunk ids, in that order (zeros for a chunk without one)."""
        out = np.zeros((len(ids), dim), np.float32)
        position = {int(i): n for n, i in enumerate(ids)}
        for start in range(0, len(ids), 900):
            part = [int(i) for i in ids[start:start + 900]]
            for cid, blob in self.db.execute(
                    f"SELECT chunk_id, vector FROM {table.name} WHERE chunk_id IN ({_marks(part)})", part):
                out[position[cid]] = np.frombuffer(blob, "<f4")
        return out

    def place_vectors(self, ids: list[int], dim: int, table: VectorTable = FIRST) -> dict[int, np.ndarray]:
        """Place vectors of those given chunk ids that have one (of this dimension)."""
        rows = self.db.execute(f"SELECT chunk_id, vector FROM {table.places} WHERE chunk_id IN ({_marks(ids)})",
                               [int(i) for i in ids])
        return {cid: np.frombuffer(blob, "<f4") for cid, blob in rows if len(blob) == 4 * dim}

    def all_vectors(self, dim: int, table: VectorTable = FIRST) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of every embedded chunk, in id order; what an index is rebuilt from."""
        n = self.count_embedded(table=table)
        ids, vectors = np.empty(n, np.int64), np.empty((n, dim), np.float32)
        i = 0
        for cid, blob in self.db.execute(f"SELECT chunk_id, vector FROM {table.name} ORDER BY chunk_id"):
            if i == n:  # a concurrent writer added rows meanwhile; the next open reconciles
                break
            ids[i], vectors[i] = cid, np.frombuffer(blob, "<f4")
            i += 1
        return ids[:i], vectors[:i]

    def vectors_after(self, last_id: int, dim: int, table: VectorTable = FIRST) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of the chunks embedded after `last_id`: rowids only grow, in commit order (a
        second embedder's vectors too: they are added in id order, KnowledgeBase.embed_second)."""
        rows = self.db.execute(f"SELECT chunk_id, vector FROM {table.name} WHERE chunk_id > ? ORDER BY chunk_id",
                               [last_id]).fetchall()
        vectors = np.array([np.frombuffer(b, "<f4") for _, b in rows], np.float32).reshape(len(rows), dim)
        return np.array([r[0] for r in rows], np.int64), vectors

    def count_embedded(self, up_to: int | None = None, table: VectorTable = FIRST) -> int:
        sql, args = f"SELECT count(*) FROM {table.name}", []
        if up_to is not None:
            sql, args = sql + " WHERE chunk_id <= ?", [up_to]
        return self.db.execute(sql, args).fetchone()[0]

    def embedded_ids(self, up_to: int | None = None, table: VectorTable = FIRST) -> np.ndarray:
        sql, args = f"SELECT chunk_id FROM {table.name}", []
        if up_to is not None:
            sql, args = sql + " WHERE chunk_id <= ?", [up_to]
        return np.array([r[0] for r in self.db.execute(sql + " ORDER BY chunk_id", args)], np.int64)

    def chunk_ids(self) -> np.ndarray:
        return np.array([r[0] for r in self.db.execute("SELECT id FROM chunks ORDER BY id")], np.int64)

    def iter_chunk_texts(self, batch: int = 256) -> Iterator[list[tuple[int, str | None, str, str | None, str]]]:
        """(chunk id, document title, heading path, FAQ entry id, text) in batches: what re-embedding needs."""
        rows = self.db.execute("SELECT c.id, d.title, c.heading, c.entry_id, c.text FROM chunks c "
                               "JOIN documents d ON d.id = c.document_id ORDER BY c.id").fetchall()
        for start in range(0, len(rows), batch):
            yield rows[start:start + batch]

    def unembedded(self, table: VectorTable, batch: int,
                   after: int = 0) -> list[tuple[int, str | None, str, str | None, str]]:
        """The first `batch` chunks with ids above `after` without a vector in `table`, in id order, as
        `iter_chunk_texts` gives them (`after`: where the previous batch ended, so that a fill reads each
        chunk once instead of passing over every filled one again)."""
        return self.db.execute(
            "SELECT c.id, d.title, c.heading, c.entry_id, c.text FROM chunks c JOIN documents d ON d.id = "
            f"c.document_id WHERE c.id > ? AND c.id NOT IN (SELECT chunk_id FROM {table.name}) ORDER BY c.id LIMIT ?",
            [after, batch]).fetchall()

    def add_vectors(self, table: VectorTable, rows: list[tuple[int, np.ndarray, np.ndarray]]) -> WriteResult:
        """(chunk id, vector, place vector) for existing chunks, in a table other than FIRST (a chunk
        deleted meanwhile is skipped)."""
        with self._writing():
            present = {r[0] for r in self.db.execute(
                f"SELECT id FROM chunks WHERE id IN ({_marks(rows)})", [int(row[0]) for row in rows])}
            kept = [(int(cid), v, place) for cid, v, place in rows if int(cid) in present]
            for name, column in ((table.name, 1), (table.places, 2)):
                self.db.conn.executemany(f"INSERT OR REPLACE INTO {name} (chunk_id, vector) VALUES (?, ?)",
                                         [(row[0], vector_blob(row[column])) for row in kept])
            generation = self._bump_generation()
        return WriteResult(np.zeros(0, np.int64), np.array([row[0] for row in kept], np.int64), generation)

    def drop_vectors(self, table: VectorTable) -> None:
        """Forget every vector of `table` and its model (a second embedder replaced by another)."""
        with self._writing():
            self.db.execute(f"DELETE FROM {table.name}")
            self.db.execute(f"DELETE FROM {table.places}")
            self.db.execute("DELETE FROM meta WHERE key IN (?, ?)", [table.model_key, table.dim_key])
            self._bump_generation()

    def replace_vectors(self, rows: list[tuple[int, np.ndarray]], places: list[tuple[int, np.ndarray]]) -> None:
        """New vectors (and place vectors) for existing chunks: after a change of embedding model."""
        with self._writing():
            self.db.conn.executemany("UPDATE embeddings SET vector = ? WHERE chunk_id = ?",
                                     [(vector_blob(v), int(cid)) for cid, v in rows])
            self.db.conn.executemany("INSERT OR REPLACE INTO places (chunk_id, vector) VALUES (?, ?)",
                                     [(int(cid), vector_blob(v)) for cid, v in places])
            self._bump_generation()

    def text_stats(self) -> tuple[int, float]:
        """(chunks, mean text length) for BM25, recounted when any process changed the KB."""
        generation = self.generation()
        if self._text_stats is None or self._text_stats[0] != generation:
            n, mean = self.db.execute("SELECT count(*), avg(length(text)) FROM chunks").fetchone()
            self._text_stats = (generation, (n, mean or 1.0))
        return self._text_stats[1]

    # ---- FTS
    def fts_ids(self, table: str) -> np.ndarray:
        """Rowids the FTS index holds (its docsize shadow table has one row per indexed row)."""
        return np.array([r[0] for r in self.db.execute(f"SELECT id FROM {table}_docsize ORDER BY id")], np.int64)

    def fts_integrity(self, table: str) -> str | None:
        try:
            self.db.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            return None
        except sqlite3.DatabaseError as e:
            return str(e)

    def rebuild_fts(self) -> None:
        with self.db.atomic():
            for table in FTS_TABLES:
                self.db.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
            self.db.execute(f"INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}) VALUES ('delete-all')")
            self._fill_bigrams()

    def _fill_bigrams(self) -> None:
        self.db.execute(f"INSERT INTO {BIGRAM_TABLE}(rowid, heading, text) SELECT id, hexrag_bigram_text(heading), "
                        f"hexrag_bigram_text(text) FROM chunks WHERE {BIGRAM_CHUNKS} ORDER BY id")

    def bigram_chunk_ids(self) -> np.ndarray:
        """The chunks the bigram index should hold: those with CJK text."""
        return np.array([r[0] for r in self.db.execute(
            f"SELECT id FROM chunks WHERE {BIGRAM_CHUNKS} ORDER BY id")], np.int64)

    def counts(self) -> dict[str, int]:
        return _counts(self.db.conn)

    def snapshot(self) -> tuple[dict[str, int], dict[str, str]]:
        """counts() and the meta table through a connection of its own, safe to call from any thread
        without the KB lock: a WAL reader sees the last commit and never waits for the writer."""
        with contextlib.closing(sqlite3.connect(self.path, timeout=10)) as conn:
            return _counts(conn), dict(conn.execute("SELECT key, value FROM meta").fetchall())


def _counts(conn: sqlite3.Connection) -> dict[str, int]:
    q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {"documents": q("SELECT count(*) FROM documents"), "chunks": q("SELECT count(*) FROM chunks"),
            "embeddings": q("SELECT count(*) FROM embeddings"), SECOND.name: q(f"SELECT count(*) FROM {SECOND.name}"),
            "tokens": q("SELECT coalesce(sum(tokens), 0) FROM chunks")}


def _marks(values) -> str:
    return ", ".join("?" * len(values))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _split_sql(script: str) -> list[str]:
    """Statements of a script (trigger bodies contain ';', so split with sqlite3.complete_statement)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                out.append(current.strip())
            current = ""
    return out
