"""One accelerator, one generation at a time: a bounded wait queue and a thread bridge.

The LLM engine is synchronous; generations run on one dedicated worker thread and stream their
deltas back to the event loop. A client that disconnects cancels its generation, which stops
within one decode step and frees the accelerator for the next request.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from app.errors import overloaded

class _Finished:
    """Queue marker: the worker is done and this is the generation's result."""

    def __init__(self, result):
        self.result = result


class Reservation:
    """The right to use the accelerator; `release()` is idempotent so every exit path may call it."""

    def __init__(self, owner: "Accelerator"):
        self._owner = owner
        self._start = time.monotonic()
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._release(time.monotonic() - self._start)


class Accelerator:
    def __init__(self, max_queue: int, queue_timeout_s: float):
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelerator")
        self._avg_s = 2.0  # running estimate of a generation's duration, for Retry-After

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def _retry_after(self) -> int:
        return max(1, math.ceil(self._avg_s * (self._waiting + 1)))

    async def acquire(self) -> Reservation:
        """Wait for the accelerator: 429 when too many already wait, 503 when the wait times out."""
        if self._lock.locked() and self._waiting >= self.max_queue:
            raise overloaded(self._retry_after(), 429)
        self._waiting += 1
        try:
            await asyncio.wait_for(self._lock.acquire(), self.queue_timeout_s)
        except TimeoutError:
            raise overloaded(self._retry_after(), 503) from None
        finally:
            self._waiting -= 1
        return Reservation(self)

    def _release(self, held_s: float) -> None:
        self._avg_s = 0.8 * self._avg_s + 0.2 * held_s
        self._lock.release()

    async def stream(self, start: Callable[[threading.Event], Iterable], timeout_s: float) -> AsyncIterator:
        """Run a generation on the worker; yields its items, then its `result`. Cancels on exit."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()

        def work():
            try:
                gen = start(cancel)
                for delta in gen:
                    loop.call_soon_threadsafe(queue.put_nowait, delta)
                loop.call_soon_threadsafe(queue.put_nowait, _Finished(gen.result))
            except BaseException as e:  # surfaced on the event loop side
                loop.call_soon_threadsafe(queue.put_nowait, e)

        done = loop.run_in_executor(self._worker, work)
        timer = loop.call_later(timeout_s, cancel.set)  # a runaway generation ends as "cancelled"
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, _Finished):
                    yield item.result
                    return
                yield item
        finally:
            timer.cancel()
            cancel.set()  # client gone or done: the worker stops within one step
            await asyncio.shield(done)
