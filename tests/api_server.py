"""A real `hexrag serve` process on a free loopback port, for API and browser tests (app.bench.server,
with one CPU thread per server so the suite's servers share two cores)."""

from __future__ import annotations

from pathlib import Path

from app.bench.server import Server as _Server
from app.bench.server import free_port

__all__ = ["Server", "free_port"]


class Server(_Server):
    def __init__(self, llm: Path | None, embedder: Path | None, kb: Path | None, log: Path,
                 command: list[str] | None = None, cwd: Path | None = None, **settings):
        super().__init__(llm, embedder, kb, log, command, cwd=cwd, **{"threads": 1, **settings})
