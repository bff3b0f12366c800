"""FAISS backends: exact flat inner product, HNSW graph, IVF inverted lists.

Flat and HNSW sit inside an IndexIDMap2 so FAISS ids are the chunk rowids; IVF stores the ids
itself. HNSW cannot remove vectors, so deletions become tombstones filtered out with an IDSelector
until the index is rebuilt."""

from __future__ import annotations

import math
from contextlib import contextmanager

import faiss
import numpy as np

from knowledge.index.base import VectorIndex


def _selector(allowed: np.ndarray | None, excluded: np.ndarray | None):
    """An IDSelector for the search params, or None; the caller keeps it alive during the search."""
    parts = []
    if allowed is not None:
        parts.append(faiss.IDSelectorBatch(np.ascontiguousarray(allowed, np.int64)))
    if excluded is not None and len(excluded):
        parts.append(faiss.IDSelectorNot(faiss.IDSelectorBatch(np.ascontiguousarray(excluded, np.int64))))
    if not parts:
        return None, parts
    if len(parts) == 1:
        return parts[0], parts
    both = faiss.IDSelectorAnd(parts[0], parts[1])
    return both, parts + [both]


@contextmanager
def _threads_for(queries: int):
    """One query runs on one thread anyway (FAISS parallelises over queries); an OpenMP team
    waking up for it only adds latency on a busy CPU."""
    if queries > 1:
        yield
        return
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


class _IdMapIndex(VectorIndex):
    """Common code of the backends wrapped in IndexIDMap2."""

    def __init__(self, dim: int, index: faiss.Index | None = None):
        super().__init__(dim)
        self.index = index if index is not None else faiss.IndexIDMap2(self._make_inner(dim))

    def _make_inner(self, dim: int) -> faiss.Index:
        raise NotImplementedError

    def _params(self, selector) -> faiss.SearchParameters | None:
        return faiss.SearchParameters(sel=selector) if selector is not None else None

    def add(self, ids, vectors):
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(ids, np.int64))

    def _raw_ids(self) -> np.ndarray:
        return faiss.vector_to_array(self.index.id_map).astype(np.int64)

    def ids(self):
        return np.sort(self._raw_ids())

    def __len__(self):
        return int(self.index.ntotal)

    def search(self, queries, k, allowed=None, excluded=None):
        selector, keep_alive = _selector(allowed, excluded)
        params = self._params(selector)
        with _threads_for(len(queries)):
            scores, ids = self.index.search(np.ascontiguousarray(queries, np.float32), k, params=params)
        del keep_alive
        return scores, ids

    def write(self, path):
        faiss.write_index(self.index, str(path))


class FlatIndex(_IdMapIndex):
    """Exact search; cost grows linearly with the chunk count (fine up to ~100k on a phone-class CPU)."""
    kind = "flat"

    def _make_inner(self, dim):
        return faiss.IndexFlatIP(dim)

    def remove(self, ids):
        if len(ids):
            self.index.remove_ids(np.ascontiguousarray(ids, np.int64))

    @classmethod
    def read(cls, path, dim, state):
        return cls(dim, faiss.read_index(str(path)))


class HNSWIndex(_IdMapIndex):
    kind = "hnsw"
    M, EF_CONSTRUCTION, EF_SEARCH = 32, 80, 96
    MAX_TOMBSTONE_RATIO = 0.2

    def __init__(self, dim, index=None, deleted: np.ndarray | None = None, ef_search: int | None = None):
        super().__init__(dim, index)
        self.deleted = np.unique(np.asarray(deleted if deleted is not None else [], np.int64))
        self.ef_search = ef_search or self.EF_SEARCH

    def _make_inner(self, dim):
        inner = faiss.IndexHNSWFlat(dim, self.M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = self.EF_CONSTRUCTION
        return inner

    def _params(self, selector):
        return faiss.SearchParametersHNSW(sel=selector, efSearch=self.ef_search) if selector is not None \
            else faiss.SearchParametersHNSW(efSearch=self.ef_search)

    def search(self, queries, k, allowed=None, excluded=None):
        excluded = self.deleted if excluded is None else np.union1d(self.deleted, excluded)
        saved, self.ef_search = self.ef_search, max(self.ef_search, k)
        try:
            return super().search(queries, k, allowed, excluded)
        finally:
            self.ef_search = saved

    def add(self, ids, vectors):
        ids = np.asarray(ids, np.int64)
        if np.isin(ids, self.deleted).any():
            raise ValueError("re-adding a tombstoned id needs a rebuild")  # rowids are never reused
        super().add(ids, vectors)

    def remove(self, ids):
        live = np.setdiff1d(np.intersect1d(self._raw_ids(), ids), self.deleted)
        self.deleted = np.union1d(self.deleted, live)

    def ids(self):
        return np.setdiff1d(self._raw_ids(), self.deleted)

    def __len__(self):
        return int(self.index.ntotal) - len(self.deleted)

    def state(self):
        return {"deleted": self.deleted.tolist(), "ef_search": self.ef_search}

    @property
    def wants_rebuild(self):
        return len(self.deleted) > self.MAX_TOMBSTONE_RATIO * max(1, int(self.index.ntotal))

    @classmethod
    def read(cls, path, dim, state):
        return cls(dim, faiss.read_index(str(path)), state.get("deleted"), state.get("ef_search"))


class IVFIndex(VectorIndex):
    """Inverted lists over k-means cells: trains on the vectors it is built from; supports removal."""
    kind = "ivf"
    MIN_POINTS_PER_LIST = 39  # below this FAISS warns that k-means is poorly trained

    def __init__(self, dim, index: faiss.IndexIVFFlat, nprobe: int | None = None):
        super().__init__(dim)
        self.index = index
        self.index.nprobe = nprobe or max(1, self.index.nlist // 16)

    @staticmethod
    def nlist_for(n: int) -> int:
        return int(min(max(16, 4 * math.sqrt(n)), max(16, n // IVFIndex.MIN_POINTS_PER_LIST)))

    @classmethod
    def build(cls, dim: int, ids: np.ndarray, vectors: np.ndarray, nlist: int | None = None,
              nprobe: int | None = None, train_size: int = 100_000, seed: int = 0) -> IVFIndex:
        nlist = nlist or cls.nlist_for(len(ids))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.own_fields = True
        quantizer.this.disown()
        sample = vectors
        train_size = max(train_size, 40 * nlist)  # FAISS wants >= 39 points per centroid
        if len(vectors) > train_size:  # k-means on a sample: training cost stays bounded
            sample = vectors[np.random.default_rng(seed).choice(len(vectors), train_size, replace=False)]
        index.train(np.ascontiguousarray(sample, np.float32))
        out = cls(dim, index, nprobe)
        out.add(ids, vectors)
        return out

    def add(self, ids, vectors):
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(ids, np.int64))

    def remove(self, ids):
        if len(ids):
            self.index.remove_ids(np.ascontiguousarray(ids, np.int64))

    def search(self, queries, k, allowed=None, excluded=None):
        selector, keep_alive = _selector(allowed, excluded)
        params = faiss.SearchParametersIVF(sel=selector, nprobe=self.index.nprobe) if selector is not None \
            else faiss.SearchParametersIVF(nprobe=self.index.nprobe)
        with _threads_for(len(queries)):
            scores, ids = self.index.search(np.ascontiguousarray(queries, np.float32), k, params=params)
        del keep_alive
        return scores, ids

    def ids(self):
        lists = self.index.invlists
        parts = [faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
                 for i in range(self.index.nlist) if lists.list_size(i)]
        return np.sort(np.concatenate(parts).astype(np.int64)) if parts else np.zeros(0, np.int64)

    def __len__(self):
        return int(self.index.ntotal)

    def write(self, path):
        faiss.write_index(self.index, str(path))

    def state(self):
        return {"nprobe": int(self.index.nprobe)}

    @classmethod
    def read(cls, path, dim, state):
        return cls(dim, faiss.read_index(str(path)), state.get("nprobe"))
