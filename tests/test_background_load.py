"""`hexrag bench llm --background-load N`: the busy-looping processes run beside every system's
run and are gone after it; and the CPU session options that keep hexrag fast on a shared CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from app.bench import llm_speed
from app.bench.load import HOG_MARK, CpuHog
from app.cli import main
from app.settings import RuntimeSettings
from runtime.options import RuntimeOptions
from runtime.session import GraphSession


def _hogs(parent: int | None = None) -> list[int]:
    """Live hog processes (of `parent`, if given), found by their command line."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if HOG_MARK.encode() in cmd and stat[0] != "Z" and (parent is None or int(stat[1]) == parent):
            out.append(int(d.name))
    return out


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _wait_for(check, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_hogs_spin_while_the_block_runs_and_are_reaped_after():
    with CpuHog(2) as hog:
        pids = hog.pids
        # a child just started may not have its command line yet: wait for both
        assert len(pids) == 2 and _wait_for(lambda: sorted(_hogs(os.getpid())) == sorted(pids))
        assert _wait_for(lambda: all(_cpu_ticks(p) > 0 for p in pids))  # they burn CPU
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # killed and reaped: not even a zombie
            os.kill(pid, 0)
    assert _hogs(os.getpid()) == []
    with CpuHog(0) as none:
        assert none.pids == []


def test_hogs_end_when_the_benchmark_dies():
    """A benchmark killed halfway (no cleanup runs) leaves no hog spinning."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from app.bench.load import CpuHog; "
            "h = CpuHog(1); h.start(); print(h.pids[0], flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).resolve().parents[1])],
                              stdout=subprocess.PIPE, text=True)
    try:
        hog = int(parent.stdout.readline())
        assert _wait_for(lambda: hog in _hogs(parent.pid))  # its command line may come a moment later
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _wait_for(lambda: hog not in _hogs())


def test_bench_runs_every_system_beside_the_hogs(tiny_builds, monkeypatch):
    """Each run starts with N hogs alive beside it, none between runs; loads are recorded."""
    seen: list[list[int]] = []
    real_spawn = llm_speed._spawn

    def spawn(spec):
        # a hog just started may not have its command line yet (as above): wait for both, 5 s at most
        _wait_for(lambda: len(_hogs(os.getpid())) >= 2, timeout_s=5.0)
        seen.append(_hogs(os.getpid()))
        return real_spawn(spec)

    monkeypatch.setattr(llm_speed, "_spawn", spawn)
    result = llm_speed.compare(tiny_builds["llama"], [], [8], gen=2, runs=2, threads=1, progress=False,
                               background_load=2)
    assert [len(h) for h in seen] == [2, 2] and not set(seen[0]) & set(seen[1])  # fresh hogs per run
    assert _hogs(os.getpid()) == []
    assert result.background_load == 2 and result.cores == len(os.sched_getaffinity(0))
    for run in result.systems[0].runs:
        assert set(run["load"]) == {"before", "after"} and all(v >= 0 for v in run["load"].values())
    table = llm_speed.format_table(result)
    assert f"2 busy-looping process(es) beside every run, {result.cores} core(s)" in table


def test_bench_cli_background_load(tiny_builds):
    runner = CliRunner()
    proc = runner.invoke(main, ["bench", "llm", "--model", str(tiny_builds["llama"]), "--vs", "", "--lengths", "8",
                                "--gen", "2", "--runs", "1", "--threads", "1", "--background-load", "1", "--json"])
    assert proc.exit_code == 0, proc.output
    out = json.loads(proc.stdout)
    assert out["background_load"] == 1 and len(out["medians"]["hexrag"]["load_average"]) == 2
    assert _hogs(os.getpid()) == []
    bad = runner.invoke(main, ["bench", "llm", "--model", str(tiny_builds["llama"]), "--background-load", "-1"])
    assert bad.exit_code == 2 and "--background-load" in bad.output


def test_cpu_sessions_spin_briefly_and_are_not_pinned(tiny_builds, monkeypatch):
    graph = next(tiny_builds["bert"].glob("embed.onnx"))
    session = GraphSession(graph)  # no thread count given: every core this process may use
    options = session._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.intra_op.spin_duration_us") == "20"
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    ids = np.ones((4, 32), np.int32)
    session.run({"input_ids": ids, "attention_mask": ids})
    # ONNX Runtime pins its workers to single cores only when it picks the thread count itself;
    # every thread of this process may still run on every core
    allowed = {Path(t / "status").read_text().split("Cpus_allowed_list:")[1].split()[0]
               for t in Path(f"/proc/{os.getpid()}/task").iterdir()}
    assert len(allowed) == 1
    still = GraphSession(graph, RuntimeOptions(threads=1, spin_us=0))._session.get_session_options()
    assert still.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert still.intra_op_num_threads == 1
    # HEXRAG_SPIN_US reaches the options every command opens its models with
    assert RuntimeSettings().runtime("cpu").spin_us == 20
    monkeypatch.setenv("HEXRAG_SPIN_US", "0")
    assert RuntimeSettings().runtime("cpu").spin_us == 0
