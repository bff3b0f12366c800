"""How the runtime runs a model's graphs: one typed value, handed down explicitly from the edge
(the CLI's flags, the server's Settings) to every session it opens.

The runtime reads no environment variables: app/settings.py is the one place where `HEXRAG_*`
names become these options (`Settings.runtime()`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.errors import RuntimeModelError

if TYPE_CHECKING:
    import onnxruntime as ort

PERFORMANCE_MODES = ("burst", "sustained_high_performance", "high_performance", "balanced",
                     "default", "low_balanced", "power_saver", "low_power_saver", "high_power_saver",
                     "extreme_power_saver")
# ONNX Runtime severities; QNN's own log level follows the session's severity
LOG_LEVELS = {"verbose": 0, "info": 1, "warning": 2, "error": 3, "fatal": 4}
SPIN_US = 20  # CPU workers' spin before they sleep (thread_options says why it is short)
MAX_SPIN_US = 100_000


class RuntimeOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["cpu", "htp"] = "cpu"
    threads: int | None = None  # host threads per session; None: every core this process may run on
    # how long an idle ONNX Runtime worker busy-waits for the next parallel section before it sleeps
    # (CPU sessions; 0: never)
    spin_us: int = Field(default=SPIN_US, ge=0, le=MAX_SPIN_US)
    # prompt-lookup decoding (runtime/lookup.py): a generation that asks for it (`LLM.generate(draft=
    # True)`) checks up to this many tokens drafted from its context per step (0: never drafts)
    draft_tokens: int = Field(default=6, ge=0, le=31)
    # HTP
    target: str | None = None  # the build to load when a model holds several (sm8650 ...)
    soc_model: int | None = None  # a plain float graph is compiled at load for this SoC (57 = SM8650)
    performance_mode: str = "burst"  # QNN htp_performance_mode
    log_level: int = LOG_LEVELS["error"]  # ORT severity of HTP sessions; QNN's log follows it
    # profiling: every CPU session writes an ONNX Runtime profile into profile_dir (runtime.profile),
    # every HTP session QNN's detailed profile into qnn_profile_dir as <graph>.csv
    profile_dir: Path | None = None
    qnn_profile_dir: Path | None = None

    @field_validator("backend", mode="before")
    @classmethod
    def _backend(cls, value):
        if value not in ("cpu", "htp"):
            raise RuntimeModelError(f"unknown backend {value!r} (choose from cpu, htp)")
        return value

    @field_validator("performance_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value not in PERFORMANCE_MODES:
            raise RuntimeModelError(f"unknown htp_performance_mode {value!r} (choose from {', '.join(PERFORMANCE_MODES)})")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value) -> int:
        return log_severity(value)


def log_severity(level: str | int) -> int:
    """ORT severity (0 verbose … 4 fatal) from a name or a number."""
    if isinstance(level, int) or str(level).strip().isdigit():
        if 0 <= int(level) <= 4:
            return int(level)
    else:
        key = str(level).strip().lower()
        key = {"warn": "warning", "debug": "verbose", "trace": "verbose"}.get(key, key)
        if key in LOG_LEVELS:
            return LOG_LEVELS[key]
    raise RuntimeModelError(f"unknown QNN log level {level!r} (choose from {', '.join(LOG_LEVELS)} or 0-4)")


# ONNX Runtime's intra-op workers busy-wait for the next parallel section before they sleep. A
# decode step is hundreds of small parallel sections, and waking a sleeping worker for each costs
# more than the section on a small model; but on a CPU other processes keep busy, a spinning worker
# takes the time slices the thread holding the work needs. Measured on SmolLM2 (python -m
# runtime.ab): a long spin lost 27-31% of decode beside busy processes, no spin 27% on a quiet
# machine. A spin of 20 us bridges the gaps between a step's sections and gives up soon after
# (docs/benchmarks.md, "On a shared CPU"). RuntimeOptions.spin_us sets it; 0 turns spinning off.


def thread_options(options: ort.SessionOptions, threads: int | None, spin_us: int = 0) -> None:
    """The CPU thread pool of a session (the CPU EP's, or the host side of a QNN session).

    The thread count is always given to ONNX Runtime explicitly: when it picks the count itself
    (0) it also pins each worker to one core, and a pinned worker cannot move off a core another
    process is using (measured: `Cpus_allowed_list` of the worker is `1` with 0, `0-1` with 2)."""
    count = threads or len(os.sched_getaffinity(0))
    options.intra_op_num_threads = count
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_us else "0")
    if spin_us:
        options.add_session_config_entry("session.intra_op.spin_duration_us", str(spin_us))
