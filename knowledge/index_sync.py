"""One process's vector index, kept in step with SQLite while other processes write the same KB.

SQLite is the source of truth; the index is derived. Every write that changes vectors bumps the
KB's generation in its own transaction (`Store.generation`), so:

- before each use, a process compares the generation it has indexed with SQLite's (one lookup);
  when they differ it catches up: chunks with rowids above its high-water mark are added (rowids
  only grow, in commit order) and chunks it holds that SQLite no longer has are removed;
- index files are written under a lock file, after catching up, and only when the index on disk is
  not newer (its sidecar records the generation it reflects): no process overwrites a newer index.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from knowledge import index as vindex
from knowledge.errors import KnowledgeBaseBusyError
from knowledge.store import FIRST, Store, VectorTable, WriteResult

log = logging.getLogger(__name__)
LOCK_TIMEOUT_S = 120.0  # longest wait for another process writing the index files


class SyncedIndex:
    """The index of one embedder's vectors (`table`: the KB's own, or its second embedder's)."""

    def __init__(self, store: Store, path: Path, table: VectorTable = FIRST):
        self.store, self.path, self.table = store, path, table
        self._lock = FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_TIMEOUT_S)
        self.index: vindex.VectorIndex | None = None
        self.model: str | None = None  # the embedding model the in-memory vectors come from
        self.generation = -1  # the KB generation the in-memory index reflects
        self.high_water = 0  # highest chunk rowid the index has seen
        self.dirty = False  # holds changes the file on disk lacks
        self.last_rebuild_reason: str | None = None  # why opening rebuilt the index, if it did

    @property
    def model_id(self) -> str | None:
        return self.store.get_meta(self.table.model_key)

    def wanted_kind(self, count: int) -> str:
        return vindex.resolve_kind(self.store.get_meta("index_kind") or "auto", count)

    # ---- reading
    def current(self) -> vindex.VectorIndex | None:
        """The index, up to date with SQLite; None while the KB has no embedding model."""
        if self.index is None:
            self._open()
        elif self.store.generation() != self.generation:
            self._catch_up()
        return self.index

    def _open(self) -> None:
        """Load the file and catch up with SQLite, or rebuild when the file cannot be trusted."""
        if self.model_id is None:  # nothing embedded yet
            return
        try:
            sidecar = vindex.read_sidecar(self.path)
            reason = self._unusable(sidecar)
            if reason is None:
                self.index = vindex.load_index(self.path, sidecar)
                self.model, self.generation, self.dirty = sidecar["model_id"], sidecar["generation"], False
                self.high_water = int(sidecar["max_id"])
                self._catch_up()
                if np.array_equal(self.index.ids(), self.store.embedded_ids(table=self.table)):
                    self.save()  # when it lagged SQLite (a writer stopped before saving)
                    return
                reason = "index ids differ from the SQLite chunk ids"
        except vindex.IndexFileError as e:
            reason = str(e)
        # (a KB about to receive its first vectors has nothing to rebuild)
        if self.store.count_embedded(table=self.table):
            log.info("rebuilding the vector index of %s: %s", self.path.parent, reason)
            self.last_rebuild_reason = reason
        self.rebuild()

    def _unusable(self, sidecar: dict) -> str | None:
        if sidecar.get("model_id") != self.model_id:
            return f"index built with {sidecar.get('model_id')}, KB uses {self.model_id}"
        if not isinstance(sidecar.get("generation"), int):
            return "index sidecar without a KB generation"
        if sidecar["generation"] > self.store.generation():
            return "index newer than SQLite"  # e.g. kb.sqlite restored from a backup
        if sidecar.get("kind") != (wanted := self.wanted_kind(self.store.count_embedded(table=self.table))):
            return f"index kind {sidecar.get('kind')} but {wanted} is wanted"
        return None

    def _catch_up(self) -> None:
        """Apply what was committed since the index's generation (by any process)."""
        generation = self.store.generation()  # read first: the rows read next are at least this new
        if self.model_id != self.model:
            self.rebuild()  # re-embedded: vectors changed in place
            return
        index = self.index
        if self.store.count_embedded(self.high_water, self.table) != len(index):  # something was deleted
            index.remove(np.setdiff1d(index.ids(), self.store.embedded_ids(self.high_water, self.table)))
            self.dirty = True
        ids, vectors = self.store.vectors_after(self.high_water, index.dim, self.table)
        if len(ids):
            index.add(ids, vectors)
            self.high_water = int(ids[-1])
            self.dirty = True
        self.generation = generation

    # ---- writing
    def apply(self, write: WriteResult, vectors: np.ndarray) -> None:
        """Follow this process's own committed write: mirrored in memory when it is the only change
        since the index's generation, else caught up from SQLite like any other change."""
        if self.index is None:
            self._open()  # loads (or rebuilds) with the write included
            return
        if write.generation != self.generation + 1:
            self._catch_up()
            return
        self.index.remove(write.removed)
        self.index.add(write.added, vectors)
        if len(write.added):
            self.high_water = max(self.high_water, int(write.added.max()))
        self.generation, self.dirty = write.generation, True

    def rebuild(self) -> None:
        """A new index from every vector in SQLite, saved."""
        with self._locked():
            generation = self.store.generation()  # first: the vectors read next are at least this new
            dim = int(self.store.get_meta(self.table.dim_key))
            ids, vectors = self.store.all_vectors(dim, self.table)
            self.index = vindex.build_index(self.wanted_kind(len(ids)), dim, ids, vectors)
            self.model, self.generation = self.model_id, generation
            self.high_water = int(ids[-1]) if len(ids) else 0
            self._write()

    def save(self) -> None:
        """Write the index if it holds changes the file lacks: under the lock, after catching up, and
        never over a newer index."""
        if self.index is None or not self.dirty:
            return
        with self._locked():
            self._catch_up()
            if self.index.wants_rebuild or self.index.kind != self.wanted_kind(len(self.index)):
                self.rebuild()  # switch flat -> hnsw past the threshold, drop tombstones
                return
            try:
                on_disk = vindex.read_sidecar(self.path).get("generation", -1)
            except vindex.IndexFileError:
                on_disk = -1
            if on_disk <= self.generation:
                self._write()

    def _write(self) -> None:  # (under the lock)
        if stale := vindex.remove_stale_temp_files(self.path):
            log.info("removed %s, left by an index write that was killed", ", ".join(stale))
        vindex.save_index(self.index, self.path, self.model or "", self.generation)
        self.dirty = False

    def _locked(self):
        try:
            return self._lock.acquire()
        except Timeout:
            raise KnowledgeBaseBusyError(f"another process has held the vector index of {self.path.parent} "
                                         f"for {LOCK_TIMEOUT_S:.0f}s") from None
