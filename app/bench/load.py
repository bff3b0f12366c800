"""A fixed CPU hog for `hexrag bench llm --background-load N`: N busy-looping processes.

Started before one system's run and stopped (killed and reaped) right after it, so every system
is measured beside the same hog and the table can say how each one copes with a shared CPU. The
hogs run at the benchmark's own priority (they inherit its nice value). Each
hog also ends by itself when the process that started it goes away, so a benchmark killed halfway
leaves none spinning.
"""

from __future__ import annotations

import os
import subprocess
import sys

# a pure-Python busy loop; the parent check every million iterations costs nothing measurable.
# The parent's pid comes as an argument: read with getppid() at start-up, it would already be 1
# for a hog whose parent died while the hog was still starting, and that hog would never stop
HOG_CODE = ("import os, sys\nparent = int(sys.argv[1])\n"
            "while os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n")
HOG_MARK = "hexrag-cpu-hog"  # in each hog's command line, so a test (or ps) can find them


def cpu_count() -> int:
    """The cores this process may run on (what the hog count is reported against)."""
    return len(os.sched_getaffinity(0))


class CpuHog:
    """`processes` busy-looping processes while the `with` block runs (0: none)."""

    def __init__(self, processes: int):
        if processes < 0:
            raise ValueError("the number of hog processes must be >= 0")
        self.processes = processes
        self._procs: list[subprocess.Popen] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        for _ in range(self.processes - len(self._procs)):
            self._procs.append(subprocess.Popen([sys.executable, "-c", HOG_CODE, str(os.getpid()), HOG_MARK],
                                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for p in self._procs:
            p.kill()
        for p in self._procs:
            p.wait(timeout=30)  # reaped: no zombie left behind
        self._procs = []

    def __enter__(self) -> CpuHog:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
