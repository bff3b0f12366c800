"""The vector-index interface: ids are the chunk rowids, vectors are L2-normalised, score = inner product."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np


class VectorIndex(ABC):
    kind: str = ""

    def __init__(self, dim: int):
        self.dim = dim

    @abstractmethod
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    @abstractmethod
    def remove(self, ids: np.ndarray) -> None: ...

    @abstractmethod
    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None,
               excluded: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query row; missing slots have id -1.

        `allowed` restricts the search to those ids, `excluded` leaves those out."""

    @abstractmethod
    def ids(self) -> np.ndarray:
        """Live ids, sorted (int64)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def write(self, path: Path) -> None:
        """Write the index data to `path` (the caller makes it atomic)."""

    @classmethod
    @abstractmethod
    def read(cls, path: Path, dim: int, state: dict[str, Any]) -> VectorIndex: ...

    def state(self) -> dict[str, Any]:
        """Small backend state kept in the sidecar (parameters, tombstones)."""
        return {}

    @property
    def wants_rebuild(self) -> bool:
        """True when the backend has degraded (e.g. many tombstones) and should be rebuilt from SQLite."""
        return False


def ids_checksum(ids: np.ndarray) -> str:
    return hashlib.sha256(np.sort(np.asarray(ids, np.int64)).tobytes()).hexdigest()
