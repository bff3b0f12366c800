"""`hexrag bench llm`: hexrag's CPU backend and its peers on the same model, side by side.

    for run in 1..N:  for system in (hexrag, llama.cpp, genai):  a fresh process runs every prompt length
    ─► per system and metric: the median over runs ─► one table, every value with its ratio to hexrag

Runs are interleaved (A/B/A/B) so a machine that gets busier or quieter during the benchmark
affects every system alike. With `background_load` N, N busy-looping processes (app.bench.load)
run beside every system's run, started just before it and stopped just after it: how each system
copes with a CPU it shares. Every run records the load average before and after it. A peer that
is not installed, has no model, or fails gets a row that says so; only hexrag itself failing
stops the command.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.bench.errors import BenchError
from app.bench.load import CpuHog, cpu_count
from app.bench.runners import RunSpec
from runtime.options import SPIN_US

PEERS = {"llama.cpp": "llama.cpp", "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp",
         "genai": "genai", "onnxruntime-genai": "genai", "ort-genai": "genai"}
_MODULES = {"llama.cpp": "llama_cpp", "genai": "onnxruntime_genai"}
NOT_INSTALLED = "not installed (pip install -e '.[peers]')"
RUN_TIMEOUT_S = 3600


def parse_peers(spec: str) -> list[str]:
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise BenchError(f"unknown peer {unknown[0]!r} for --vs (choose from llama.cpp, genai)")
    return list(dict.fromkeys(PEERS[n] for n in names))


@dataclass
class SystemResult:
    name: str
    model: str | None = None  # what this system loads
    status: str | None = None  # why there are no numbers (not installed / not available / failed)
    runs: list[dict] = field(default_factory=list)  # one runner result per process

    @property
    def ok(self) -> bool:
        return self.status is None and bool(self.runs)

    def median(self, key: str, prompt: int | None = None) -> float:
        if prompt is None:
            return statistics.median(r[key] for r in self.runs)
        return statistics.median(row[key] for r in self.runs for row in r["rows"] if row["prompt"] == prompt)

    def loads(self) -> list[float]:
        """The 1-minute load averages read before and after each of this system's runs."""
        return [v for r in self.runs for v in (r.get("load") or {}).values()]

    def ids(self, prompt: int) -> str | None:
        return next((row["ids"] for row in self.runs[0]["rows"] if row["prompt"] == prompt), None) if self.runs else None


@dataclass
class Comparison:
    model: str
    lengths: list[int]
    gen: int
    runs: int
    threads: int
    systems: list[SystemResult]
    backend: str = "cpu"
    background_load: int = 0  # busy-looping processes beside every run
    cores: int | None = None  # the cores the benchmark could use
    spin_us: int = SPIN_US  # how long hexrag's CPU workers spin (RuntimeOptions.spin_us)

    def summary(self) -> dict:
        """Medians per system (what --json prints, next to the raw runs)."""
        out = {}
        for s in self.systems:
            if not s.ok:
                out[s.name] = {"status": s.status}
                continue
            out[s.name] = {
                "ttft_ms": {n: round(s.median("ttft_ms", n), 1) for n in self.lengths},
                "prefill_tok_s": {n: round(s.median("prefill_tok_s", n), 1) for n in self.lengths},
                # one number for the table: the median over prompt lengths (each length's value is kept too)
                "decode_tok_s": round(statistics.median(s.median("decode_tok_s", n) for n in self.lengths), 2),
                "decode_tok_s_by_prompt": {n: round(s.median("decode_tok_s", n), 2) for n in self.lengths},
                "peak_rss_mb": round(s.median("peak_rss_mb")),
                "decode_tok_s_range": [round(min(r), 2), round(max(r), 2)] if (r := self._decode_per_run(s)) else None,
                "load_average": [round(min(s.loads()), 2), round(max(s.loads()), 2)] if s.loads() else None,
                "same_prompt_ids_as_hexrag": all(s.ids(n) == self.systems[0].ids(n) for n in self.lengths),
                "version": s.runs[0].get("version"),
            }
        return out

    def _decode_per_run(self, s: SystemResult) -> list[float]:
        """Each run's decode tok/s (its median over the prompt lengths): the spread behind the median."""
        return [statistics.median(row["decode_tok_s"] for row in r["rows"]) for r in s.runs]

    @classmethod
    def from_dict(cls, d: dict) -> Comparison:
        """Back from `to_dict()` (a saved --json run), e.g. to draw it again."""
        return cls(d["model"], d["lengths"], d["gen"], d["runs"], d["threads"],
                   [SystemResult(**s) for s in d["systems"]], d.get("backend", "cpu"),
                   d.get("background_load", 0), d.get("cores"))

    def to_dict(self) -> dict:
        return {"model": self.model, "lengths": self.lengths, "gen": self.gen, "runs": self.runs,
                "threads": self.threads, "backend": self.backend, "background_load": self.background_load,
                "cores": self.cores, "medians": self.summary(), "systems": [asdict(s) for s in self.systems]}


def _peer_input(peer: str, model_dir: Path, gguf: Path | None, genai_model: Path | None) -> tuple[str | None, str | None]:
    """(what the peer loads, None) or (None, why it cannot run)."""
    if importlib.util.find_spec(_MODULES[peer]) is None:
        return None, NOT_INSTALLED
    if peer == "llama.cpp":
        if gguf is None:
            from models.manifest import load_manifest

            src = load_manifest(model_dir, verify=False).source
            gguf = Path(src.path) if src.format == "gguf" else None
            if gguf is None:
                return None, "not available: the model was not built from a GGUF (pass --gguf FILE)"
        if not gguf.is_file():
            return None, f"not available: no GGUF at {gguf} (pass --gguf FILE)"
        return str(gguf), None
    if genai_model is None:
        return None, "not available: pass --genai-model DIR (how to build one: docs/benchmarks.md)"
    if not (genai_model / "genai_config.json").is_file():
        return None, f"not available: {genai_model} has no genai_config.json"
    return str(genai_model), None


def _run_beside(spec: RunSpec, hogs: int) -> dict:
    """One system's run with `hogs` busy-looping processes beside it, and the load around it."""
    with CpuHog(hogs):
        before = os.getloadavg()[0]
        result = _spawn(spec)
        result["load"] = {"before": round(before, 2), "after": round(os.getloadavg()[0], 2)}
    return result


def _spawn(spec: RunSpec) -> dict:
    proc = subprocess.run([sys.executable, "-m", "app.bench.runners", json.dumps(asdict(spec))],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(model_dir: Path, peers: list[str], lengths: list[int], gen: int, runs: int, threads: int,
            gguf: Path | None = None, genai_model: Path | None = None, backend: str = "cpu",
            progress: bool = True, background_load: int = 0, spin_us: int = SPIN_US) -> Comparison:
    from tqdm import tqdm

    from models.manifest import load_manifest

    m = load_manifest(model_dir, verify=False)
    if m.kind != "llm":
        raise BenchError(f"{model_dir} holds an {m.kind} model, not an LLM")
    if max(lengths) + gen > m.context:
        raise BenchError(f"prompt {max(lengths)} + {gen} generated tokens exceed the model's context {m.context}: "
                         f"rebuild it with --context {max(lengths) + gen} or more")
    if gen < 2 or runs < 1 or threads < 1:
        raise BenchError("--gen must be at least 2 (decode speed needs a second token), --runs and --threads at least 1")
    if background_load < 0:
        raise BenchError("--background-load must be 0 (none) or a number of busy-looping processes")
    systems = [SystemResult("hexrag", str(model_dir))]
    for peer in peers:
        model, status = _peer_input(peer, model_dir, gguf, genai_model)
        systems.append(SystemResult(peer, model, status))
    live = [s for s in systems if s.status is None]
    with tqdm(total=runs * len(live), desc="bench", unit="run", disable=not progress, file=sys.stderr) as bar:
        for _ in range(runs):
            for s in live:  # interleaved: A B A B
                bar.set_postfix_str(s.name)
                if s.status is None:
                    try:
                        spec = RunSpec(s.name, s.model, list(lengths), gen, threads,
                                       backend if s.name == "hexrag" else "cpu", spin_us)
                        s.runs.append(_run_beside(spec, background_load))
                    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                        if s.name == "hexrag":
                            raise BenchError(f"hexrag run failed: {e}") from None
                        s.status, s.runs = f"failed: {e}", []
                bar.update()
    return Comparison(str(model_dir), list(lengths), gen, runs, threads, systems, backend, background_load,
                      cpu_count(), spin_us)


def _cell(value: float, ref: float | None, fmt: str) -> str:
    if fmt == ".0f" and value < 10:  # a tiny model's sub-10 ms TTFT must not print as "0"
        fmt = ".1f"
    text = format(value, fmt)
    return f"{text} ({value / ref:.2f}×)" if ref else text


def _span(pair: list[float] | None) -> str:
    return f"{pair[0]:.1f}–{pair[1]:.1f}" if pair else "?"


def format_table(c: Comparison) -> str:
    """Markdown: one row per system; peers' cells carry peer ÷ hexrag."""
    big = max(c.lengths)
    header = ["system", *[f"TTFT@{n} ms" for n in c.lengths], f"prefill tok/s @{big}", "decode tok/s",
              "decode min–max", "peak RSS MB", "load avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    medians = c.summary()
    ref = medians.get("hexrag", {})
    for s in c.systems:
        row = medians[s.name]
        if "status" in row:
            lines.append(f"| {s.name} | {row['status']} |" + " |" * (len(header) - 2))
            continue
        peer = s.name != "hexrag"

        def cell(key: str, fmt: str, n: int | None = None) -> str:
            value = row[key] if n is None else row[key][n]
            base = (ref[key] if n is None else ref[key][n]) if peer else None
            return _cell(value, base, fmt)

        lines.append("| " + " | ".join([
            s.name + ("" if row["same_prompt_ids_as_hexrag"] else " *"),
            *[cell("ttft_ms", ".0f", n) for n in c.lengths], cell("prefill_tok_s", ".0f", big),
            cell("decode_tok_s", ".1f"), _span(row["decode_tok_s_range"]), cell("peak_rss_mb", ".0f"),
            _span(row["load_average"])]) + " |")
    notes = [f"medians of {c.runs} interleaved run(s), one process per run; {c.gen} generated tokens, greedy, "
             f"{c.threads} thread(s); hexrag on {c.backend} (workers spin {c.spin_us} µs), peers on the CPU; decode = median over the prompt lengths; (n×) = peer ÷ hexrag (TTFT and RSS: lower is better; tok/s: higher is better)"]
    hog = (f"{c.background_load} busy-looping process(es) beside every run" if c.background_load
           else "no background load from the benchmark")
    notes.append(f"{hog}, {c.cores or '?'} core(s); decode min–max over runs; load avg = the 1-minute load "
                 f"average read before and after each run (min–max; other processes count too)")
    if any(not r.get("same_prompt_ids_as_hexrag", True) for r in medians.values()):
        notes.append("* its tokenizer cut the same text into different ids than hexrag's")
    return "\n".join(lines + [""] + notes)
