"""The regression gate: which report metrics count, and the comparison against a baseline report.

Accuracy metrics may fall at most `tolerance` (absolute) below the baseline; lower-is-better ones
(perplexity change) rise at most that much above it. Speed metrics are ratios measured in one
process (overhead.py) and may fall at most `speed` (relative) below the baseline: absolute timings
on a shared two-core machine would gate the machine's load, not the code. Every metric in the
baseline must be measured again: one that disappeared fails too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.bench.errors import BenchError

LOWER_IS_BETTER = {"llm.perplexity_change"}
DEFAULT_TOLERANCE = 0.01  # accuracy, absolute
DEFAULT_SPEED_TOLERANCE = 0.5  # speed ratios, relative: measured spread on a busy machine is ±15%


def gate_metrics(report: dict) -> dict[str, float]:
    """The gated numbers of a report, flat: `section.metric` -> value."""
    gate: dict[str, float] = {}
    for row in report["retrieval"]["results"]:
        if row["lang"] == "all":
            gate[f"retrieval.{row['mode']}.recall@5"] = row["recall@5"]
            gate[f"retrieval.{row['mode']}.mrr"] = row["mrr"]
    emb = report["embedder_quantization"]
    if "embedding_cosine" in emb:
        gate["embedder.cosine"] = emb["embedding_cosine"]
        gate["embedder.quantized_dense_recall@5"] = emb["dense_recall@5_quantized"]
    llm = report["llm_quantization"]
    if "greedy_agreement" in llm:
        for key in ("greedy_agreement", "logits_cosine", "perplexity_change"):
            gate[f"llm.{key}"] = llm[key]
    if "correct" in report["answers"]:
        gate["answers.correct"] = report["answers"]["correct"]
    if "decode_ratio" in report["speed"]:
        gate["speed.decode_ratio"] = report["speed"]["decode_ratio"]
    return gate


@dataclass
class Check:
    metric: str
    value: float | None
    baseline: float
    allowed: float  # the worst value that still passes
    ok: bool

    def line(self) -> str:
        got = "not measured" if self.value is None else f"{self.value:.4f}"
        bound = "≤" if self.metric in LOWER_IS_BETTER else "≥"
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.metric}: {got} (baseline {self.baseline:.4f}, "
                f"needs {bound} {self.allowed:.4f})")


def parse_tolerances(specs: tuple[str, ...]) -> tuple[float, float, dict[str, float]]:
    """`0.02` sets the accuracy tolerance, `speed=0.3` the speed one, `METRIC=0.05` one metric's."""
    accuracy, speed, per_metric = DEFAULT_TOLERANCE, DEFAULT_SPEED_TOLERANCE, {}
    for spec in specs:
        name, _, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise BenchError(f"--tolerance {spec!r}: expected a number, speed=N or METRIC=N") from None
        if number < 0:
            raise BenchError(f"--tolerance {spec!r}: must not be negative")
        if not name:
            accuracy = number
        elif name == "speed":
            speed = number
        else:
            per_metric[name] = number
    return accuracy, speed, per_metric


def compare(report: dict, baseline: dict, accuracy: float = DEFAULT_TOLERANCE, speed: float = DEFAULT_SPEED_TOLERANCE,
            per_metric: dict[str, float] | None = None) -> list[Check]:
    per_metric = per_metric or {}
    measured = report.get("gate", {})
    checks = []
    for metric, base in sorted(baseline.get("gate", {}).items()):
        value = measured.get(metric)
        if metric.startswith("speed."):
            allowed = base * (1 - per_metric.get(metric, speed))
        elif metric in LOWER_IS_BETTER:
            allowed = base + per_metric.get(metric, accuracy)
        else:
            allowed = base - per_metric.get(metric, accuracy)
        ok = value is not None and (value <= allowed if metric in LOWER_IS_BETTER else value >= allowed)
        checks.append(Check(metric, value, base, allowed, ok))
    return checks


def load_report(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BenchError(f"cannot read report {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("gate"), dict):
        raise BenchError(f"{path} is not an eval report (no \"gate\" object): write one with `hexrag eval --all --out FILE`")
    return data


def load_baseline(path: Path, mode: str) -> dict:
    data = load_report(path)
    if data.get("mode") != mode:
        raise BenchError(f"baseline {path} is a {data.get('mode')} report; this is a {mode} run: compare like with like")
    return data
