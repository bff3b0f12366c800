"""Interactive work first: the requests a user waits on (answers, searches, embeddings) are counted
while in flight, and background work (an upload's ingest) yields to them between its steps; work
that may wait any time (the kept passage rows) waits for a quiet spell.

On a device the ingest and the answer share the same cores (or NPU): without this, a large upload
slows every answer by the ingest's share of the machine for as long as it runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MAX_YIELD_S = 2.0  # a step waits at most this long, so an ingest still moves under steady traffic
POLL_S = 0.02


class Foreground:
    def __init__(self) -> None:
        self._active = 0
        self._lock = threading.Lock()
        self._last_end = 0.0  # time.monotonic() when the last request ended

    @property
    def active(self) -> bool:
        return self._active > 0

    def enter(self) -> None:
        with self._lock:
            self._active += 1

    def exit(self) -> None:
        with self._lock:
            self._active -= 1
            self._last_end = time.monotonic()

    def wait_idle(self, stop: threading.Event, idle_s: float, give_way: Callable[[], bool]) -> None:
        """Block until no interactive request is in flight and none has ended for `idle_s` (a user's
        next question often follows within seconds), or until `stop` is set or `give_way()` is true.
        For work that may wait any time: nothing depends on it finishing soon."""
        while not (stop.is_set() or give_way()):
            quiet = time.monotonic() - self._last_end
            if not self.active and quiet >= idle_s:
                return
            stop.wait(min(POLL_S * 5, max(idle_s - quiet, POLL_S)))

    def wait_quiet(self, stop: threading.Event, max_wait_s: float = MAX_YIELD_S) -> None:
        """Block while interactive work is in flight (at most `max_wait_s`, or until `stop` is set)."""
        deadline = time.monotonic() + max_wait_s
        while self.active and not stop.is_set() and time.monotonic() < deadline:
            stop.wait(POLL_S)


class ForegroundRequests:
    """ASGI middleware: a request to one of `paths` is foreground work until its response has been
    sent whole (a stream: until its last event)."""

    def __init__(self, app, foreground: Foreground, paths: tuple[str, ...]):
        self.app, self.foreground, self.paths = app, foreground, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        self.foreground.enter()
        try:
            return await self.app(scope, receive, send)
        finally:
            self.foreground.exit()
