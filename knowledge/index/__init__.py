"""Vector-index backends behind one interface, a factory, and atomic persistence with a sidecar.

The index is derived data: SQLite holds every vector, so any index can be rebuilt from it. The
sidecar (index.json) records what the index file holds (count, max id, checksum of the ids, the
embedding model, the KB generation it reflects, the file's sha256) so a stale index is caught up
and an altered one rebuilt on open."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from knowledge.index.base import VectorIndex, ids_checksum
from knowledge.index.faiss import FlatIndex, HNSWIndex, IVFIndex
from models.manifest import sha256_file

KINDS: dict[str, type[VectorIndex]] = {"flat": FlatIndex, "hnsw": HNSWIndex, "ivf": IVFIndex}
INDEX_CHOICES = ("auto", *KINDS)
# "auto": exact search until it gets slow; see `python -m knowledge.bench` for the measurements
AUTO_HNSW_THRESHOLD = 100_000
IVF_MIN_VECTORS = 10_000  # fewer vectors train k-means poorly; such small KBs stay flat
SIDECAR_VERSION = 1


class IndexFileError(Exception):
    """The index file or its sidecar is missing, unreadable or does not match (callers rebuild)."""


def resolve_kind(requested: str, count: int) -> str:
    if requested not in INDEX_CHOICES:
        raise ValueError(f"unknown index kind {requested!r}; choose from {', '.join(INDEX_CHOICES)}")
    if requested == "auto":
        return "hnsw" if count >= AUTO_HNSW_THRESHOLD else "flat"
    if requested == "ivf" and count < IVF_MIN_VECTORS:
        return "flat"
    return requested


def build_index(kind: str, dim: int, ids: np.ndarray, vectors: np.ndarray) -> VectorIndex:
    if kind == "ivf":
        return IVFIndex.build(dim, ids, vectors)
    index = KINDS[kind](dim)
    for start in range(0, len(ids), 65536):  # bounded temporary copies
        index.add(ids[start:start + 65536], vectors[start:start + 65536])
    return index


# ---- persistence ---------------------------------------------------------------------------
def sidecar_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not possible on every platform; the file itself is already synced
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, write) -> None:
    """write(tmp_path) -> fsync -> os.replace: readers see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def save_index(index: VectorIndex, path: Path, model_id: str, generation: int) -> dict[str, Any]:
    """Index file first, then the sidecar; a crash in between leaves a sidecar that no longer matches."""
    _write_atomic(path, index.write)
    ids = index.ids()
    sidecar = {
        "version": SIDECAR_VERSION, "kind": index.kind, "dim": index.dim, "model_id": model_id,
        "generation": generation,  # the KB generation (Store.generation) the index reflects
        "count": int(len(ids)), "max_id": int(ids[-1]) if len(ids) else 0, "ids_sha256": ids_checksum(ids),
        "file_sha256": sha256_file(path), "state": index.state(),
    }
    _write_atomic(sidecar_path(path), lambda p: p.write_text(json.dumps(sidecar)))
    return sidecar


def remove_stale_temp_files(path: Path) -> list[str]:
    """Delete the temporary files of index writes that were killed before their rename
    (`.index.faiss.<pid>.tmp`, `.index.json.<pid>.tmp`). Only for a caller that holds the index
    lock: no other write can be under way then, so every such file is an orphan."""
    stale = sorted(path.parent.glob(f".{path.stem}.*.tmp"))
    for file in stale:
        file.unlink(missing_ok=True)
    return [file.name for file in stale]


def read_sidecar(path: Path) -> dict[str, Any]:
    try:
        sidecar = json.loads(sidecar_path(path).read_text())
    except FileNotFoundError:
        raise IndexFileError("no index sidecar") from None
    except (OSError, ValueError) as e:
        raise IndexFileError(f"unreadable index sidecar ({e})") from None
    if not isinstance(sidecar, dict) or sidecar.get("version") != SIDECAR_VERSION or sidecar.get("kind") not in KINDS:
        raise IndexFileError("index sidecar of another format")
    return sidecar


def load_index(path: Path, sidecar: dict[str, Any]) -> VectorIndex:
    if not path.is_file():
        raise IndexFileError("index file missing")
    if sha256_file(path) != sidecar.get("file_sha256"):
        raise IndexFileError("index file altered (sha256 differs from its sidecar)")
    try:
        index = KINDS[sidecar["kind"]].read(path, sidecar["dim"], sidecar.get("state") or {})
    except RuntimeError as e:  # FAISS reports unreadable files as RuntimeError
        raise IndexFileError(f"unreadable index file ({str(e).splitlines()[0][:120]})") from None
    ids = index.ids()
    if len(ids) != sidecar["count"] or ids_checksum(ids) != sidecar["ids_sha256"]:
        raise IndexFileError("index ids differ from its sidecar")
    return index


__all__ = ["AUTO_HNSW_THRESHOLD", "INDEX_CHOICES", "IndexFileError", "KINDS", "VectorIndex", "build_index",
           "ids_checksum", "load_index", "read_sidecar", "remove_stale_temp_files", "resolve_kind", "save_index"]
