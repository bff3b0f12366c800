"""Exact BM25 from this process's copy of an FTS5 index's posting lists.

FTS5's bm25() costs ~0.5 µs for every row a query matches (it looks up each row's size), so an OR
of five words ranked every chunk holding any of them: 47 ms p50 at 100k chunks, where walking the
same posting lists takes 2.5 ms. Pruning inside SQLite (MaxScore: rank the chunks holding the rare
words, prove no other chunk can reach the top) stayed exact but took 16 / 72 ms p50 / p99, because
the bound 2.2 × idf is loose and mid-frequency words had to be ranked row by row anyway. Here the
posting lists of the words queried are read from FTS5's own index (fts5vocab), so terms and
frequencies are FTS5's, and scored with numpy: the same scores, the ranking alone ~0.7 / 5 ms p50 /
p99 once the lists are read (a whole KnowledgeBase.search: docs/benchmarks.md, lexical search latency).

SQLite stays the source of truth and this copy follows it the way the vector index does
(knowledge/index_sync.py): when the KB generation changes, chunks with rowids above the high-water
mark are added (rowids only grow) and chunks SQLite no longer has are dropped; a term's postings are
read on its first use and topped up from its own high-water mark. Nothing is written anywhere, so a
crash loses nothing, and a process's first search of a very common word pays for reading its list
(batteri, 77k chunks: ~60 ms at 100k chunks; a rare word: < 1 ms).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from knowledge.store import Store

K1, B = 1.2, 0.75
HEADING_WEIGHT = 2.0  # a query word in the heading path says more than one in the body


def fts5_idf(df: int, n: int) -> float:
    """FTS5 bm25()'s idf: words in more than half of the rows weigh 1e-6, never less."""
    idf = math.log((n - df + 0.5) / (df + 0.5))
    return idf if idf > 0 else 1e-6


def lucene_idf(df: int, n: int) -> float:
    """Lucene's idf (always positive): the bigram ranking has used it since it was a scan."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Term:
    """One query term of an index: a token, or with `prefix` every token starting with it."""
    text: str
    prefix: bool = False


@dataclass(frozen=True)
class Lengths:
    """Where a chunk's BM25 length comes from: (id, length) rows of `table`; `docsize` for an FTS5
    docsize table, whose blob holds one varint token count per column (bm25() sums them)."""
    table: str
    column: str
    docsize: bool = False


@dataclass
class _Postings:
    """8 bytes a (term, chunk) pair: the word index of the 100k-chunk bench KB holds 2.0M, 16 MB."""
    ids: np.ndarray  # chunk ids (int32), ascending
    tf: np.ndarray  # weighted frequency (float32, whole numbers): HEADING_WEIGHT a heading occurrence, 1 a text one
    high_water: int  # highest chunk id read


def _varint_sum(blob: bytes) -> int:
    """Sum of the SQLite varints in an FTS5 docsize blob (a byte below 0x80 ends each one)."""
    if max(blob, default=0) < 0x80:
        return sum(blob)
    total = value = 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            total, value = total + value, 0
    return total


def _by_chunk(ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row per occurrence (fts5vocab) -> (chunk ids ascending, summed weights)."""
    if len(ids) > 1 and (ids[1:] < ids[:-1]).any():  # a prefix's terms interleave their chunks
        order = np.argsort(ids, kind="stable")
        ids, weights = ids[order], weights[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return ids[starts].astype(np.int32), np.add.reduceat(weights, starts).astype(np.float32)


class Postings:
    """BM25 over one FTS5 index (heading and text columns), computed from its posting lists."""

    def __init__(self, store: Store, table: str, tokenizer: str, lengths: Lengths,
                 idf: Callable[[int, int], float]):
        self.store, self.table, self.tokenizer, self.lengths, self.idf = store, table, tokenizer, lengths, idf
        self.generation = -1
        self.high_water = 0
        self._ids = np.zeros(0, np.int64)  # slot -> chunk id, ascending
        self._length = np.zeros(0)  # slot -> length
        self._slot = np.full(1, -1, np.int64)  # chunk id -> slot (-1: no such chunk)
        self._norm = np.zeros(0)  # slot -> K1 * (1 - B + B * length / mean length)
        self._terms: dict[Term, _Postings] = {}
        self._temp_ready = False

    # ---- following SQLite
    def _sync(self) -> None:
        generation = self.store.generation()
        if generation == self.generation:
            return
        db, lengths = self.store.db, self.lengths
        rows = db.execute(f"SELECT id, {lengths.column} FROM {lengths.table} WHERE id > ? ORDER BY id",
                          [self.high_water]).fetchall()
        if rows:
            ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
            sizes = (_varint_sum(r[1]) for r in rows) if lengths.docsize else (r[1] or 0 for r in rows)
            self._ids = np.concatenate([self._ids, ids])
            self._length = np.concatenate([self._length, np.fromiter(sizes, np.float64, len(rows))])
            self.high_water = int(ids[-1])
        count = db.execute(f"SELECT count(*) FROM {lengths.table}").fetchone()[0]
        if count != len(self._ids):  # chunks were deleted (a rowid never comes back)
            alive = np.array([r[0] for r in db.execute(f"SELECT id FROM {lengths.table}")], np.int64)
            keep = np.isin(self._ids, alive)
            self._ids, self._length = self._ids[keep], self._length[keep]
        self._slot = np.full(self.high_water + 1, -1, np.int64)
        self._slot[self._ids] = np.arange(len(self._ids))
        mean = self._length.mean() if len(self._length) and self._length.sum() else 1.0
        self._norm = K1 * (1 - B + B * self._length / mean)
        self.generation = generation

    def _temp_tables(self) -> None:
        """Per-connection views of the index (fts5vocab) and of its tokenizer: nothing in the KB file."""
        if self._temp_ready:
            return
        db = self.store.db
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{self.table}_instances "
                   f"USING fts5vocab(main, {self.table}, instance)")
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{self.table}_tokenizer "
                   f"USING fts5(text, tokenize='{self.tokenizer}')")
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{self.table}_tokens "
                   f"USING fts5vocab(temp, {self.table}_tokenizer, instance)")
        self._temp_ready = True

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """The tokens this index's tokenizer makes of each text (FTS5 itself tokenizes them)."""
        self._temp_tables()
        conn = self.store.db.conn
        outside = not conn.in_transaction  # then the temp rows' implicit transaction is ended here
        conn.executemany(f"INSERT INTO temp.{self.table}_tokenizer(rowid, text) VALUES (?, ?)",
                         list(enumerate(texts, 1)))
        out: list[list[str]] = [[] for _ in texts]
        for term, doc in conn.execute(f"SELECT term, doc FROM temp.{self.table}_tokens ORDER BY doc, offset"):
            out[doc - 1].append(term)
        conn.execute(f"DELETE FROM temp.{self.table}_tokenizer")
        if outside:
            conn.commit()
        return out

    def _postings(self, term: Term) -> _Postings:
        """The term's postings up to the high-water mark, read from FTS5 as far as not read before."""
        entry = self._terms.get(term) or _Postings(np.zeros(0, np.int32), np.zeros(0, np.float32), 0)
        if entry.high_water < self.high_water:
            if term.prefix:
                where, args = "term >= ? AND term < ?", [term.text, term.text + "\U0010ffff"]
            else:
                where, args = "term = ?", [term.text]
            docs, heading = self.store.db.execute(
                "SELECT group_concat(doc), group_concat(col = 'heading') "
                f"FROM temp.{self.table}_instances WHERE {where} AND doc > ? AND doc <= ?",
                [*args, entry.high_water, self.high_water]).fetchone()
            if docs:
                ids, tf = _by_chunk(np.fromstring(docs, np.int64, sep=","),
                                    1 + (HEADING_WEIGHT - 1) * np.fromstring(heading, np.float64, sep=","))
                entry = _Postings(np.concatenate([entry.ids, ids]), np.concatenate([entry.tf, tf]), self.high_water)
            else:
                entry = _Postings(entry.ids, entry.tf, self.high_water)
            self._terms[term] = entry
        return entry

    def warm(self) -> None:
        """Read every chunk's length now (40-80 ms at 100k chunks), which a first search would."""
        self._temp_tables()
        self._sync()

    # ---- ranking
    def search(self, terms: list[Term], limit: int, document_ids: list[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, BM25 score) best first, ties by id; each term counts once per occurrence in
        `terms` (as each phrase of an FTS5 OR query does); only chunks matching some term."""
        self._temp_tables()
        self._sync()
        n = len(self._ids)
        if not n or limit <= 0:
            return []
        scores = np.zeros(n)
        for term in terms:
            entry = self._postings(term)
            slots = self._slot[entry.ids]
            if (slots < 0).any():  # deleted chunks: dropped from the list for good
                keep = slots >= 0
                entry.ids, entry.tf, slots = entry.ids[keep], entry.tf[keep], slots[keep]
            if len(slots):
                idf = self.idf(len(slots), n)
                tf = entry.tf.astype(np.float64)  # (float32 times a Python float stays float32)
                scores += np.bincount(slots, idf * tf * (K1 + 1) / (tf + self._norm[slots]), minlength=n)
        if document_ids is not None:
            ids = self.store.chunk_ids_of(document_ids)
            slots = self._slot[ids[ids <= self.high_water]]
            allowed = np.zeros(n, bool)
            allowed[slots[slots >= 0]] = True
            scores[~allowed] = 0
        found = np.flatnonzero(scores > 0)
        if len(found) > limit:  # everything at or above the limit-th score, then ties by id
            kth = np.partition(scores[found], len(found) - limit)[len(found) - limit]
            found = found[scores[found] >= kth]
        order = np.lexsort((self._ids[found], -scores[found]))[:limit]
        return [(int(self._ids[s]), float(scores[s])) for s in found[order]]
