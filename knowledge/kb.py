"""KnowledgeBase: the one object the CLI and the app use (ingest, delete, search, check, rebuild).

Layout of a KB directory: kb.sqlite (source of truth), index.faiss + index.json (derived vector
index and its sidecar)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from knowledge import index as vindex
from knowledge.chunking import HEADING_SEP, Chunk, Chunker, context_path, embed_text, place_text
from knowledge.errors import (EmbedderMismatchError, EmbedderRequiredError, KnowledgeBaseCorruptError,
                              UnknownDocumentError)
from knowledge.fusion import fused_scores
from knowledge.index_sync import SyncedIndex
from knowledge.ingest import MAX_FILE_BYTES, IngestReport, place_vectors, run_ingest
from knowledge.lexical import Lexical
from knowledge.profile import META_KEY as PROFILE_KEY
from knowledge.profile import AnswerProfile
from knowledge.paths import default_kb_dir
from knowledge.retrieval import (DEFAULT_MIN_SCORE, FUSION_DEPTH, MAX_UNKNOWN_SHARE, MODES, SCORE_KINDS,
                                 Hit, by_section, section_key)
from knowledge.store import BIGRAM_TABLE, FIRST, FTS_TABLES, SECOND, ChunkRecord, DocumentRecord, Store, VectorTable

if TYPE_CHECKING:
    from runtime.embedder import Embedder

log = logging.getLogger(__name__)
EXACT_FILTER_LIMIT = 50_000  # a filtered dense search over at most this many chunks is done exactly
MAX_DEEPENING = 32  # candidates fetched per ranking: at most this many times the sections wanted
SECOND_STEP = 16  # chunks the second embedder embeds between checkpoints (KnowledgeBase.embed_second)
# query vectors kept (KnowledgeBase._query_vector): an answer embeds its question for the search, then
# again for each long section's window (section_chunks); a few milliseconds each on a CPU
QUERY_VECTORS = 16


@dataclass(frozen=True)
class _Reader:
    """The embedder that reads a query, with the index and the stored vectors of its side."""

    embedder: Embedder
    vectors: SyncedIndex
    table: VectorTable

    @property
    def first(self) -> bool:
        return self.table == FIRST

    @property
    def dim(self) -> int:
        return self.embedder.dim


def _hit(r: ChunkRecord, score: float = 0.0, scores: dict[str, float] | None = None, kind: str = "") -> Hit:
    """A stored chunk as a search hit with its score, the signals known for it and the score's kind."""
    return Hit(r.id, r.text, r.source, r.name, r.heading, r.entry_id, score, scores or {}, r.start, r.end,
               r.document_id, kind)


@dataclass
class CheckReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        head = "ok" if self.ok else f"{len(self.problems)} problem(s)"
        return "\n".join([f"{head}: " + ", ".join(f"{v} {k}" for k, v in self.counts.items()), *self.problems])


def _embedded(embedder: Embedder, rows, text_of: Callable[[tuple[str, ...], str], str]):
    """(vectors, place vectors) of stored chunks (`Store.iter_chunk_texts` rows), each embedded as
    `text_of(its context path, its text)` says."""
    headings = [tuple(heading.split(HEADING_SEP)) if heading else () for _, _, heading, _, _ in rows]
    vectors = embedder.embed([text_of(context_path(title, h), text)
                              for (_, title, _, _, text), h in zip(rows, headings)]).vectors
    places = place_vectors(embedder, [place_text(title, h, entry, text)
                                      for (_, title, _, entry, text), h in zip(rows, headings)], vectors)
    return vectors, places


class KnowledgeBase:
    DB_FILE, INDEX_FILE, SECOND_INDEX_FILE = "kb.sqlite", "index.faiss", "index_second.faiss"

    def __init__(self, kb_dir: Path, store: Store, embedder: Embedder | None, index_kind: str,
                 max_tokens: int | None, overlap: float):
        self.dir, self.store, self.embedder = kb_dir, store, embedder
        # for the queries `embedder` cannot read (Chinese with an English model): a multilingual one,
        # whose vectors the KB keeps beside the first's (use_second, embed_second)
        self.second_embedder: Embedder | None = None
        self.index_kind = index_kind
        self._max_tokens, self._overlap = max_tokens, overlap
        self._chunker: Chunker | None = None
        self._vectors = SyncedIndex(store, kb_dir / self.INDEX_FILE)
        self._second_vectors = SyncedIndex(store, kb_dir / self.SECOND_INDEX_FILE, SECOND)
        self._lexical = Lexical(store)  # BM25 from the posting lists this process has read
        # the answerability threshold search() applies when given min_score=None (calibrated for
        # all-MiniLM-L6-v2; set another after `hexrag eval retrieval` with another embedder)
        self.default_min_score: float = DEFAULT_MIN_SCORE
        # one statement at a time on the shared SQLite connection and the in-memory index (the app serves
        # from threads); held for a search or one document's commit, never for a whole ingest
        self._lock = threading.RLock()
        self._writing = threading.Lock()  # one ingest or delete at a time in this process
        self._queries: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()  # (model, query) -> vector
        self._queries_lock = threading.Lock()

    # ---- opening
    @classmethod
    def open(cls, kb_dir: str | Path | None = None, embedder: Embedder | None = None, *, index: str | None = None,
             max_tokens: int | None = None, overlap: float = 0.15,
             second_embedder: Embedder | None = None) -> KnowledgeBase:
        """Open (or create) a KB. Without an embedder: BM25 search, list, delete, stats, check, rebuild.

        `index` ("auto", "flat", "hnsw", "ivf") is remembered by the KB; `max_tokens` (chunk size,
        default: the embedder's sequence length) and `overlap` apply to files ingested from now on.
        `second_embedder`: searches the queries `embedder` cannot read with its vectors, once the KB
        holds them (`embed_second`, which ingest runs)."""
        kb_dir = Path(kb_dir).expanduser() if kb_dir is not None else default_kb_dir()
        kb_dir.mkdir(parents=True, exist_ok=True)
        store = Store(kb_dir / cls.DB_FILE)
        kind = index or store.get_meta("index_kind") or "auto"
        vindex.resolve_kind(kind, 0)  # validates the name
        if index:
            store.set_meta(index_kind=index)
        kb = cls(kb_dir, store, embedder, kind, max_tokens, overlap)
        if embedder is not None:
            kb._vectors.current()  # a stale index is caught up now, a missing or altered one rebuilt
        if second_embedder is not None:
            kb.use_second(second_embedder, replace=True)
        return kb

    def use_second(self, embedder: Embedder, replace: bool = False) -> bool:
        """Take `embedder` as the second embedder, unless the KB holds another model's second vectors and
        not `replace`. Returns whether the KB holds its vectors (then searches use them at once); where
        it does not, `embed_second` (which every ingest runs) embeds the chunks with it."""
        with self._lock:
            held = self.second_model_id
            if held not in (None, embedder.model_id) and not replace:
                return False
            self.second_embedder = embedder
            if held != embedder.model_id:
                return False
            self._second_vectors.current()
            return True

    def close(self) -> None:
        with self._lock:
            self._vectors.save()
            self._second_vectors.save()
            self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- model binding
    @property
    def model_id(self) -> str | None:
        with self._lock:
            return self.store.get_meta("model_id")

    @property
    def dim(self) -> int:
        with self._lock:
            value = self.store.get_meta("dim")
        if value is not None:
            return int(value)
        return self._need_embedder().dim

    def _need_embedder(self, check_model: bool = True) -> Embedder:
        if self.embedder is None:
            raise EmbedderRequiredError("this needs an embedder: open the KB with one (CLI: --embedder DIR)")
        if check_model and self.model_id is not None and self.model_id != self.embedder.model_id:
            raise EmbedderMismatchError(
                f"the KB at {self.dir} was embedded with {self.model_id}, the embedder given is "
                f"{self.embedder.model_id}; use that embedder or re-embed with `hexrag kb rebuild --reembed`")
        return self.embedder

    @property
    def second_model_id(self) -> str | None:
        """The model of the second embedder's vectors the KB holds (None: it holds none)."""
        with self._lock:
            return self.store.get_meta(SECOND.model_key)

    def embed_second(self, progress: bool = False, checkpoint: Callable[[], None] | None = None) -> int:
        """Give every chunk that lacks one its second embedder's vector (another model's vectors are
        replaced: they are derived, like the index); returns how many were embedded. Searches go on
        meanwhile (each step is committed under the lock, embedded outside it); until then a search
        ranks a chunk without a second vector by its words alone."""
        with self._writing:
            return self._fill_second(progress, checkpoint or (lambda: None))

    def _fill_second(self, progress: bool, checkpoint: Callable[[], None]) -> int:  # (holding _writing)
        from tqdm import tqdm

        second = self.second_embedder
        if second is None:
            raise EmbedderRequiredError("this needs a second embedder: open the KB with one "
                                        "(CLI: --second-embedder DIR)")
        with self._lock:
            if self.second_model_id not in (None, second.model_id):
                self.store.drop_vectors(SECOND)
            if self.second_model_id is None:
                self.store.set_meta(**{SECOND.model_key: second.model_id, SECOND.dim_key: second.dim})
            self._second_vectors.current()
            missing = self.store.counts()["chunks"] - self.store.count_embedded(table=SECOND)
        done = last = 0
        with tqdm(total=missing, unit="chunk", disable=not progress or not missing, desc="second embedder",
                  leave=False) as bar:
            while True:
                checkpoint()
                with self._lock:
                    rows = self.store.unembedded(SECOND, SECOND_STEP, after=last)
                if not rows:
                    break
                last = rows[-1][0]
                vectors, places = _embedded(second, rows, embed_text)
                with self._lock:
                    write = self.store.add_vectors(SECOND, [(row[0], v, p) for row, v, p in zip(rows, vectors, places)])
                    self._second_vectors.apply(write, vectors[np.isin([row[0] for row in rows], write.added)])
                done += len(rows)
                bar.update(len(rows))
        with self._lock:
            self._second_vectors.save()
        return done

    @property
    def chunker(self) -> Chunker:
        if self._chunker is None:
            e = self._need_embedder()
            self._chunker = Chunker(e.tokenizer, self._max_tokens or e.passage_tokens, self._overlap)
        return self._chunker

    # ---- the answer profile (knowledge/profile.py): stored with the KB, read by the answer layer
    @property
    def profile(self) -> AnswerProfile:
        with self._lock:
            stored = self.store.get_meta(PROFILE_KEY)
        if stored is None:
            return AnswerProfile()
        try:
            return AnswerProfile.model_validate_json(stored)
        except ValidationError as e:  # written by this class, so only a hand-edited database gets here
            raise KnowledgeBaseCorruptError(
                f"the answer profile stored in {self.dir} is not valid: {e.errors()[0]['msg']}; "
                "set it again with `hexrag kb profile --set`") from None

    def set_profile(self, profile: AnswerProfile | None) -> None:
        """Store `profile`; None: back to the defaults."""
        with self._lock:
            if profile is None:
                self.store.delete_meta(PROFILE_KEY)
            else:
                self.store.set_meta(**{PROFILE_KEY: profile.model_dump_json()})

    # ---- vector index (derived from SQLite, kept in step with it by knowledge.index_sync)
    @property
    def index_path(self) -> Path:
        return self.dir / self.INDEX_FILE

    @property
    def last_rebuild_reason(self) -> str | None:
        """Why opening rebuilt the vector index from SQLite, if it did (None: loaded and caught up)."""
        return self._vectors.last_rebuild_reason

    def save_index(self) -> None:
        """Write the in-memory vector index if it holds changes (ingest, delete and close do this)."""
        with self._lock:
            self._vectors.save()

    def commit_document(self, fields: dict[str, Any], chunks: list[Chunk], vectors: np.ndarray,
                        places: np.ndarray | None = None) -> None:
        """Write one document version to SQLite, then follow it in the vector index (saved later)."""
        with self._lock:
            self._vectors.apply(self.store.replace_document(fields, chunks, vectors, places), vectors)

    def remove_document(self, doc: DocumentRecord) -> None:
        with self._lock:  # SQLite first, then the index
            write = self.store.delete_document(doc.id)
            if self.model_id is not None:
                self._vectors.apply(write, np.zeros((0, self.dim), np.float32))

    # ---- writing
    def ingest(self, paths: str | Path | list[str | Path], progress: bool = True, prune: bool = True,
               max_file_bytes: int = MAX_FILE_BYTES, checkpoint: Callable[[], None] | None = None) -> IngestReport:
        """Add new files, replace changed ones, skip unchanged ones; with `prune`, forget files that
        disappeared from an ingested folder. Unreadable files, files that are not regular files and
        files over `max_file_bytes` are reported in `failed`, not raised.

        Searches go on meanwhile: files are read and embedded outside the lock searches take, and each
        document is committed (SQLite, then the index) under it, so a search sees it whole or not at all.
        With a second embedder, the chunks then get its vectors too (`embed_second`).
        `checkpoint` is called between steps (a file, a few embedder batches, a commit): it may block, to
        yield to interactive work, or raise IngestCancelled to stop; what was committed stays."""
        with self._writing:
            embedder = self._need_embedder()
            with self._lock:
                if self.model_id is None:
                    self.store.set_meta(model_id=embedder.model_id, dim=embedder.dim)
                self._vectors.current()
            try:
                report = run_ingest(self, embedder, [paths] if isinstance(paths, (str, Path)) else list(paths),
                                    progress, prune, max_file_bytes, exclude=self.dir.resolve(),
                                    checkpoint=checkpoint)
            finally:  # also after an error or Ctrl-C: what was committed gets indexed
                self.save_index()
            if self.second_embedder is not None:
                started = time.perf_counter()
                report.second_embedded = self._fill_second(progress, checkpoint or (lambda: None))
                report.seconds += time.perf_counter() - started
            return report

    def stored_document(self, source: str) -> DocumentRecord | None:
        with self._lock:
            return self.store.document(source)

    def stored_vectors(self, document_id: int) -> dict[str, tuple[bytes, bytes | None]]:
        """A stored document's vector and place vector blobs by chunk hash, for reuse by its next version."""
        with self._lock:
            return self.store.vectors_by_hash(document_id)

    def _find_documents(self, source: str) -> list[DocumentRecord]:
        docs = self.store.documents()
        try:
            resolved = str(Path(source).expanduser().resolve())
        except (RuntimeError, ValueError):  # ~nosuchuser, a NUL byte: a path no document can have
            return [d for d in docs if source in (d.source, d.name)]
        for key in (source, resolved):
            exact = [d for d in docs if d.source == key]
            if exact:
                return exact
        by_name = [d for d in docs if d.name == source]
        if by_name:
            return by_name
        # a folder: every document under it
        return [d for d in docs if Path(d.source).is_relative_to(resolved)]

    def delete(self, source: str | Path) -> list[DocumentRecord]:
        """Remove a document (by its path, its name in the KB, or a folder holding documents)."""
        if not str(source).strip():  # it would resolve to the working directory
            raise UnknownDocumentError("an empty source names no document")
        with self._writing, self._lock:
            docs = self._find_documents(str(source))
            if not docs:
                raise UnknownDocumentError(f"no document {source!r} in the KB at {self.dir}")
            try:
                for doc in docs:
                    self.remove_document(doc)
            finally:
                self._vectors.save()
            return docs

    def rebuild_index(self, reembed: bool = False, progress: bool = False) -> dict[str, Any]:
        """Rebuild the FTS indexes and the vector index from SQLite; with `reembed`, recompute every
        vector with the KB's embedder first (after switching embedding models)."""
        with self._lock:
            if reembed:
                self._reembed(progress)
            self.store.rebuild_fts()
            self._lexical = Lexical(self.store)  # read the rebuilt indexes afresh
            if self.model_id is not None:
                self._vectors.rebuild()
            if self.second_model_id is not None:
                self._second_vectors.rebuild()
            return self.stats()

    def _reembed(self, progress: bool) -> None:
        from tqdm import tqdm

        embedder = self._need_embedder(check_model=False)
        chunker = Chunker(embedder.tokenizer, self._max_tokens or embedder.passage_tokens, self._overlap)
        total = self.store.counts()["chunks"]
        with tqdm(total=total, unit="chunk", disable=not progress, desc="re-embed", leave=False) as bar:
            for rows in self.store.iter_chunk_texts():
                vectors, places = _embedded(embedder, rows, chunker.embed_text)
                ids = [row[0] for row in rows]
                self.store.replace_vectors(list(zip(ids, vectors)), list(zip(ids, places)))
                bar.update(len(rows))
        self.store.set_meta(model_id=embedder.model_id, dim=embedder.dim)

    # ---- reading
    def list_documents(self) -> list[DocumentRecord]:
        with self._lock:
            return self.store.documents()

    def stats(self) -> dict[str, Any]:
        """Counts, sizes, model and index kind. Takes no lock (a connection of its own reads the last
        commit), so a server answers health checks while an ingest runs."""
        counts, meta = self.store.snapshot()
        try:
            sidecar = vindex.read_sidecar(self.index_path)
        except vindex.IndexFileError:
            sidecar = {}
        size = lambda p: p.stat().st_size if p.exists() else 0  # noqa: E731
        return {**counts, "kb_dir": str(self.dir), "model_id": meta.get("model_id"),
                "second_model_id": meta.get(SECOND.model_key),
                "dim": int(meta.get("dim") or 0), "index_kind": sidecar.get("kind"),
                "index_policy": self.index_kind, "sqlite_bytes": size(self.dir / self.DB_FILE),
                "index_bytes": size(self.index_path)}

    def check(self) -> CheckReport:
        """Consistency of SQLite (documents, chunks, embeddings), the three FTS indexes and the vector index."""
        with self._lock:
            self._vectors.save()
            problems = []
            q = lambda sql, *a: self.store.db.execute(sql, a).fetchone()[0]  # noqa: E731
            if n := q("SELECT count(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM documents)"):
                problems.append(f"{n} chunks belong to no document")
            if n := q("SELECT count(*) FROM documents d WHERE chunk_count != "
                      "(SELECT count(*) FROM chunks c WHERE c.document_id = d.id)"):
                problems.append(f"{n} documents have a wrong chunk count")
            chunk_ids, embedded = self.store.chunk_ids(), self.store.embedded_ids()
            if not np.array_equal(chunk_ids, embedded):
                problems.append(f"{len(np.setdiff1d(chunk_ids, embedded))} chunks lack a vector, "
                                f"{len(np.setdiff1d(embedded, chunk_ids))} vectors lack a chunk")
            if len(embedded):
                dim = self.dim
                if n := q("SELECT count(*) FROM embeddings WHERE length(vector) != ?", dim * 4):
                    problems.append(f"{n} vectors are not {dim}-dimensional")
            indexed = [(table, chunk_ids) for table in FTS_TABLES] + [(BIGRAM_TABLE, self.store.bigram_chunk_ids())]
            for table, wanted in indexed:
                fts_ids = self.store.fts_ids(table)
                if not np.array_equal(fts_ids, wanted):
                    problems.append(f"{table} indexes {len(fts_ids)} rows, chunks has {len(wanted)}")
                elif err := self.store.fts_integrity(table):
                    problems.append(f"{table} integrity check failed: {err}")
            if len(embedded):
                try:
                    sidecar = vindex.read_sidecar(self.index_path)
                    if reason := self._index_file_mismatch(sidecar, embedded):
                        problems.append(f"vector index: {reason}")
                    else:
                        vindex.load_index(self.index_path, sidecar)
                except vindex.IndexFileError as e:
                    problems.append(f"vector index: {e}")
                index = self._vectors.current() if self.embedder is not None else self._vectors.index
                if index is not None and not np.array_equal(index.ids(), embedded):
                    problems.append("vector index in memory differs from SQLite")
            problems += self._second_problems(chunk_ids)
            counts = {"documents": q("SELECT count(*) FROM documents"), "chunks": len(chunk_ids),
                      "vectors": len(embedded)}
            return CheckReport(not problems, problems, counts)

    def _second_problems(self, chunk_ids: np.ndarray) -> list[str]:
        """The second embedder's vectors: each of a chunk, and its index (when loaded) holding them all.
        Chunks may lack one (embed_second fills them after each ingest)."""
        second = self.store.embedded_ids(table=SECOND)
        problems = []
        if n := len(np.setdiff1d(second, chunk_ids)):
            problems.append(f"{n} second embedder vectors lack a chunk")
        index = self._second_vectors.current() if self.second_embedder is not None else None
        if index is not None and not np.array_equal(index.ids(), second):
            problems.append("second embedder's index in memory differs from SQLite")
        return problems

    def _index_file_mismatch(self, sidecar: dict[str, Any], ids: np.ndarray) -> str | None:
        if sidecar.get("model_id") != self.model_id:
            return f"index built with {sidecar.get('model_id')}, KB uses {self.model_id}"
        if sidecar.get("count") != len(ids):
            return f"index holds {sidecar.get('count')} vectors, SQLite {len(ids)}"
        if sidecar.get("ids_sha256") != vindex.ids_checksum(ids):
            return "index ids differ from the SQLite chunk ids"
        if sidecar.get("kind") != vindex.resolve_kind(self.index_kind, len(ids)):
            return f"index kind {sidecar.get('kind')} but {vindex.resolve_kind(self.index_kind, len(ids))} is wanted"
        return None

    # ---- search
    def _document_filter(self, sources, document) -> list[int] | None:
        if sources is None and document is None:
            return None
        docs = self.store.documents()
        keep = set()
        if sources is not None:
            patterns = [sources] if isinstance(sources, str) else list(sources)
            keep |= {d.id for d in docs for p in patterns
                     if d.source == p or d.name == p or fnmatch(d.name, p) or fnmatch(d.source, p)
                     or Path(d.name).name == p}
        if document is not None:
            match = {d.id for d in docs if document in (d.id, d.source, d.name)}
            if not match:
                raise UnknownDocumentError(f"no document {document!r} in the KB at {self.dir}")
            keep = match if sources is None else keep & match
        return sorted(keep)

    def _dense(self, reader: _Reader, qvec: np.ndarray, depth: int,
               doc_ids: list[int] | None) -> list[tuple[int, float]]:
        index = reader.vectors.current()
        if index is None or not len(index):
            return []
        if doc_ids is not None:
            allowed = self.store.chunk_ids_of(doc_ids)
            if len(allowed) <= EXACT_FILTER_LIMIT:  # exact, whatever the backend (ANN + tight filters miss hits)
                sims = self.store.vectors(allowed, reader.dim, reader.table) @ qvec
                top = np.argsort(-sims)[:depth]
                return [(int(allowed[i]), float(sims[i])) for i in top]
            scores, ids = index.search(qvec[None], depth, allowed=allowed)
        else:
            scores, ids = index.search(qvec[None], depth)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def _by_section(self, fetch, want: int, records: dict[int, ChunkRecord]):
        """(the `want` best sections, each by its best chunk; score of every chunk fetched) from
        `fetch(n)`, which gives the n best chunks: asked for more while `want` distinct sections are not
        reached (a long section's windows can fill a whole candidate list), up to MAX_DEEPENING times
        deeper."""
        n = 2 * want
        while True:
            raw = fetch(n)
            records.update(self.store.chunks([i for i, _ in raw if i not in records]))
            ranking = by_section(raw, records)
            if len(ranking) >= want or len(raw) < n or n >= MAX_DEEPENING * want:
                return ranking[:want], dict(raw)  # deeper fused lists only add noise (FUSION_DEPTH)
            n *= 4

    def all_hits(self) -> list[Hit]:
        """Every chunk as a hit (score 0), in id order: for work over the whole KB."""
        with self._lock, self.store.reading():
            records = self.store.chunks(self.store.chunk_ids().tolist())
        return [_hit(r) for r in records.values()]

    def warm(self) -> None:
        """Read what the first lexical search would (the chunks' lengths of both BM25 indexes), so a
        server's first question does not wait for it (40-80 ms each at 100k chunks)."""
        with self._lock, self.store.reading():
            self._lexical.warm()

    def unknown_share(self, text: str) -> float:
        """Share of the text's tokens the embedder only knows as its unknown token ([UNK])."""
        return self._need_embedder().unknown_share(text)

    def _query_vector(self, embedder: Embedder, query: str) -> np.ndarray:
        """The query's vector by this embedder, embedded once while it is among the last QUERY_VECTORS."""
        key = (embedder.model_id, query)
        with self._queries_lock:
            if key in self._queries:
                self._queries.move_to_end(key)
                return self._queries[key]
        vector = embedder.embed([query], kind="query").vectors[0]
        with self._queries_lock:
            self._queries[key] = vector
            while len(self._queries) > QUERY_VECTORS:
                self._queries.popitem(last=False)
        return vector

    def _reader(self, query: str) -> _Reader | None:
        """The embedder that reads the query: the KB's own, else its second embedder (when the KB holds
        that one's vectors); None when neither does (then only words rank)."""
        first = self._need_embedder()
        if first.unknown_share(query) <= MAX_UNKNOWN_SHARE:
            return _Reader(first, self._vectors, FIRST)
        second = self.second_embedder
        if (second is not None and self.second_model_id == second.model_id
                and second.unknown_share(query) <= MAX_UNKNOWN_SHARE):
            return _Reader(second, self._second_vectors, SECOND)
        return None

    def read_by(self, query: str) -> Embedder | None:
        """The embedder whose vectors rank this query's hits by meaning (`embedder` or `second_embedder`;
        their cosines are on different scales), or None: it is ranked by its words alone."""
        reader = self._reader(query)
        return reader.embedder if reader is not None else None

    def nearest_in_meaning(self, hit: Hit, keep: Callable[[Hit], bool], depth: int = 256) -> Hit | None:
        """The place nearest the hit by the second embedder's stored vectors (the multilingual side) among
        those `keep` accepts ("written in Chinese": that side ranks a passage's own language first, so its
        translation lies further down), looked for among the `depth` nearest chunks; None when there is
        none there, or the KB has no second vectors for the hit."""
        second = self.second_embedder
        if second is None or self.second_model_id != second.model_id:
            return None
        with self._lock, self.store.reading():
            vectors = self.store.vectors(np.array([hit.chunk_id], np.int64), second.dim, SECOND)
            if not len(vectors):
                return None
            raw = self._dense(_Reader(second, self._second_vectors, SECOND), vectors[0], depth, None)
            records = self.store.chunks([i for i, _ in raw])
        for cid, score in raw:
            near = _hit(records[cid], score, {"dense": score}, SCORE_KINDS["dense"])
            if section_key(near) != section_key(hit) and keep(near):
                return near
        return None

    def section_text(self, hit: Hit) -> str:
        """The whole section (or FAQ entry) a hit is one chunk of: a long section is indexed in
        windows, and the sentence that answers may sit in the window next to the one that matched
        ("Towing a trailer": the weights in one, the speed limit when towing in the next). The hit's
        own text when the document has changed since the search."""
        with self._lock, self.store.reading():
            text = self.store.section_text(hit.document_id, hit.heading, hit.entry_id)
        return text if hit.text in text else hit.text

    def section_chunks(self, hit: Hit, query: str | None = None) -> list[Hit]:
        """Every chunk of the hit's section (or FAQ entry) in document order, each scored by its cosine
        with `query` (`scores["dense"]`, from the stored vectors) when one is given and the embedder reads
        it: a long section is indexed in windows and one of them stands for it in a search, while the
        sentence that answers may sit in another. Just the hit for a section of one chunk (an FAQ entry:
        nothing to score) or when the document changed since. Scored by the first embedder only: its
        cosines are the scale callers compare them on (a second embedder's cosines have another)."""
        scored = bool(query) and self.embedder is not None and self.unknown_share(query) <= MAX_UNKNOWN_SHARE
        with self._lock, self.store.reading():
            ids = self.store.section_chunk_ids(hit.document_id, hit.heading, hit.entry_id)
            if len(ids) < 2 or hit.chunk_id not in ids:
                return [hit]
            records = self.store.chunks(ids)
            vectors = self.store.vectors(np.array(ids, np.int64), self.dim) if scored else None
        cosines = {}
        if vectors is not None:  # the query embedded outside the lock: searches need not wait for it
            cosines = dict(zip(ids, (vectors @ self._query_vector(self.embedder, query)).tolist()))
        return [_hit(records[i], cosines.get(i, 0.0), {"dense": cosines[i]} if i in cosines else {},
                     SCORE_KINDS["dense"] if cosines else "") for i in ids]

    def search(self, query: str, k: int = 5, mode: str = "hybrid", sources: str | list[str] | None = None,
               document: int | str | None = None, min_score: float | None = None) -> list[Hit]:
        """The k best places for a query: one chunk per section (or FAQ entry), best first.

        mode: "dense" (cosine of embeddings), "bm25" (FTS5 BM25; needs no embedder) or "hybrid"
        (both fused on their scores with the place cosine, fusion.fused_scores). A query the embedder
        cannot read (Chinese with an English-only model) is embedded by the second embedder when the KB
        has one (its cosines and place cosines), else ranked by BM25 alone. Each hit's `score` is its
        mode's (`score_kind`: cosine, bm25 or fused) and `scores` holds every signal known for it.
        sources: document paths, names or glob patterns; document: one document id, path or name.

        min_score is an answerability threshold on the first embedder's cosine similarity: dense drops
        hits below it; hybrid returns [] when the best cosine among its candidates is below it (not
        applied to queries the first embedder cannot read: another model's cosines have another scale).
        None means the KB's calibrated default (`default_min_score`); -1 disables it. For bm25 it is a
        BM25 score and has no default."""
        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; choose from {', '.join(MODES)}")
        if k <= 0 or not query.strip():
            return []
        with self._lock, self.store.reading():  # one commit throughout, whatever other processes write
            doc_ids = self._document_filter(sources, document)
            if doc_ids == []:
                return []
            if min_score is None and mode != "bm25":
                min_score = self.default_min_score
            want = k if mode != "hybrid" else max(FUSION_DEPTH, k)  # distinct sections per ranking
            records: dict[int, ChunkRecord] = {}
            dense: list[tuple[int, float]] = []
            dense_score: dict[int, float] = {}
            qvec = None
            reader = self._reader(query) if mode != "bm25" else None
            readable = reader is not None
            if mode == "dense" and reader is None:  # asked for: the first embedder's best guess
                reader = _Reader(self._need_embedder(), self._vectors, FIRST)
            if reader is not None:
                qvec = self._query_vector(reader.embedder, query)
                dense, dense_score = self._by_section(lambda n: self._dense(reader, qvec, n, doc_ids), want, records)
            if reader is not None and not reader.first:
                min_score = None
            lexical, bm25_score = [], {}
            place_score: dict[tuple, float] = {}
            if mode in ("bm25", "hybrid"):
                lexical, bm25_score = self._by_section(lambda n: self._lexical.search(query, n, doc_ids), want,
                                                       records)
            if mode == "dense":
                ranked = dense
            elif mode == "bm25":
                ranked = lexical
            else:
                # fused by section: the candidates of either ranking, each by its best chunk (the dense
                # side's chunk speaks for it), scored on the signals themselves (fusion.fused_scores)
                chunk_of = {section_key(records[i]): i for i, _ in lexical + dense}
                missing = np.array([i for i in chunk_of.values() if i not in dense_score], np.int64)
                if len(missing) and reader is not None:  # cosine of the BM25-only candidates
                    dense_score.update(zip(missing.tolist(),
                                           (self.store.vectors(missing, reader.dim, reader.table) @ qvec).tolist()))
                places = self.store.place_vectors(list(chunk_of.values()), reader.dim, reader.table) if readable else {}
                if places and len(places) == len(chunk_of):  # a KB from before place vectors: without them
                    place_score = {key: float(places[cid] @ qvec) for key, cid in chunk_of.items()}
                best_bm25 = {section_key(records[i]): s for i, s in lexical}
                order = [section_key(records[i]) for i, _ in dense + lexical]  # ties: the dense side's first
                cosine = {key: dense_score.get(chunk_of[key], 0.0) for key in chunk_of}
                fused = fused_scores(dict.fromkeys(order), cosine, best_bm25, place_score, readable)
                ranked = [(chunk_of[key], score) for key, score in fused]
                if min_score is not None and readable and (not dense or max(dense_score.values()) < min_score):
                    return []
            if min_score is not None and mode != "hybrid":
                ranked = [(i, s) for i, s in ranked if s >= min_score]
            hits = []
            for cid, score in ranked[:k]:
                r = records[cid]
                scores = {"dense": dense_score.get(cid), "bm25": bm25_score.get(cid)}
                if mode == "hybrid":
                    scores["hybrid"], scores["place"] = score, place_score.get(section_key(r))
                hits.append(_hit(r, float(score), {m: float(s) for m, s in scores.items() if s is not None},
                                 SCORE_KINDS[mode]))
            return hits
