"""Compile a model directory's ONNX graphs for Qualcomm HTP: QNN context binaries wrapped in
EPContext models (`<graph>_ctx.onnx` + `<first graph>_ctx_qnn.bin`), float graphs in fp16.

Compilation runs in a child process (`python -m build_scripts.compile --worker job.json`) at
ONNX Runtime log severity 0, its output captured into a log file and parsed: that is where QNN
says, per node, "Validation PASSED/FAILED … REASON". A child process also keeps the QNN
compiler's crashes and memory out of the caller. CPU fallback is always disabled, so a graph
either goes entirely to HTP or the build fails naming the nodes that did not.

Two variants per target:
- `shared`: prefill and decode graphs share one weights binary (`ep.share_ep_contexts=1` on every
  session, `ep.stop_share_ep_contexts=1` on the last): what devices load.
- `sim`: one binary per graph: what the x86 HTP simulator loads (it cannot load shared binaries).

Layout inside a model directory: `htp/<target>/<shared|sim>/<graph>_ctx.onnx` + `*.bin`; an LLM
over the part budget is split by layers first (build_scripts/split.py) and each part compiled in
its own child process: `<graph>.part<k>_ctx.onnx`, one shared binary per part.
`compile_model_dir` returns the entry proposed for the manifest's `target` field.

This module talks to ONNX Runtime directly (no import of `runtime`: build_scripts and runtime
stay independent; both configure the QNN EP the same way).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from build_scripts.errors import BuildError

EP_NAME = "QNNExecutionProvider"
_MARKER = "@@HEXRAG-QNN-JOB"


# ------------------------------------------------------------------------------------------------
# Targets
# ------------------------------------------------------------------------------------------------

class Target(NamedTuple):
    soc_model: int  # QNN SoC id (provider option soc_model)
    htp_arch: int  # HTP architecture (v75 -> 75; provider option htp_arch)
    name: str  # canonical key, also the directory name under htp/
    chip: str
    float_ok: bool = True  # the HTP runs float graphs (fp16); False: quantize first


_TARGET_LIST = [
    # float_ok=False measured with QNN 2.51: every float graph fails to finalize with
    # QNN_COMMON_ERROR_MEM_ALLOC (1002) on SM8350's v68 HTP, which has no fp16 unit.
    (Target(30, 68, "sm8350", "Snapdragon 888", float_ok=False), ("888", "sd888", "snapdragon888")),
    (Target(36, 69, "sm8450", "Snapdragon 8 Gen 1"), ("8gen1",)),
    (Target(43, 73, "sm8550", "Snapdragon 8 Gen 2"), ("8gen2",)),
    (Target(57, 75, "sm8650", "Snapdragon 8 Gen 3"), ("8gen3",)),
    (Target(60, 73, "sc8380xp", "Snapdragon X Elite"), ("xelite", "x-elite")),
    (Target(69, 79, "sm8750", "Snapdragon 8 Elite"), ("8elite",)),
    (Target(87, 81, "sm8850", "Snapdragon 8 Elite Gen 5"), ("8elite-gen5", "8elitegen5")),
    # SA8295P: soc id 39 is QNN's SA8295 (ExecuTorch's QcomChipset.SA8295 = 39, v68); QNN 2.51
    # compiles float graphs for it (unlike SM8350). Not verified against a device.
    (Target(39, 68, "sa8295p", "Snapdragon SA8295P (automotive)"), ("sa8295",)),
]

TARGETS: dict[str | int, Target] = {}
for _t, _aliases in _TARGET_LIST:
    TARGETS[_t.name] = _t
    TARGETS[_t.soc_model] = _t
    for _a in _aliases:
        TARGETS[_a] = _t


def resolve_target(spec: str | int | Target) -> Target:
    """A Target from its name (sm8650), alias (8gen3), or QNN soc id (57 / "57")."""
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, int) or (str(spec).strip().isdigit() and int(spec) in TARGETS):
        key: str | int = int(spec)
    else:
        key = re.sub(r"^snapdragon[\s_-]*", "", str(spec).strip().lower()).replace(" ", "").replace("_", "-")
        key = key if key in TARGETS else key.replace("-", "")
    if key not in TARGETS:
        names = ", ".join(sorted(t.name for t, _ in _TARGET_LIST))
        raise BuildError(f"unknown HTP target {spec!r} (choose from {names}, or a QNN soc_model number)")
    return TARGETS[key]


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------

@dataclass
class NodeIssue:
    name: str
    op_type: str
    reason: str


@dataclass
class CompileReport:
    onnx_path: Path
    ctx_path: Path
    target: Target
    fp16: bool
    shared: bool
    ok: bool = False
    seconds: float | None = None  # session creation time (= QNN compile + context write)
    binary: Path | None = None  # the context binary the EPContext model references
    placements: dict[str, str] = field(default_factory=dict)  # node name -> "QNN" | "CPU"
    op_types: dict[str, str] = field(default_factory=dict)  # node name -> op type
    removed: list[str] = field(default_factory=list)  # source nodes ONNX Runtime optimised away
    rejected: list[NodeIssue] = field(default_factory=list)  # nodes QNN refused, with its reason
    uncreated: list[str] = field(default_factory=list)  # nodes that passed validation but QNN could not build
    error: str | None = None
    sdk_version: str | None = None  # ep_sdk_version in the EPContext node
    log_path: Path | None = None  # full verbose log (kept on failure or when asked)
    group: list["CompileReport"] = field(default_factory=list)  # all reports of a shared group

    @property
    def htp_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p == "QNN"]

    @property
    def cpu_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p != "QNN"]

    def summary(self) -> dict:
        return {"onnx": str(self.onnx_path), "ctx": str(self.ctx_path), "binary": str(self.binary) if self.binary else None,
                "target": self.target.name, "ok": self.ok, "seconds": self.seconds, "htp_nodes": len(self.htp_nodes),
                "cpu_nodes": self.cpu_nodes, "rejected": [vars(r) for r in self.rejected], "error": self.error}


class HTPCompileError(BuildError):
    """Some graph did not compile entirely for HTP; `.reports` says which nodes and why."""

    def __init__(self, message: str, reports: list[CompileReport]):
        super().__init__(message)
        self.reports = reports


# ------------------------------------------------------------------------------------------------
# Versions
# ------------------------------------------------------------------------------------------------

def qnn_versions() -> dict[str, str]:
    """onnxruntime / onnxruntime-qnn versions and the QNN SDK the wheel ships."""
    out = {}
    for pkg, key in (("onnxruntime", "onnxruntime"), ("onnxruntime-qnn", "onnxruntime_qnn")):
        try:
            out[key] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        from onnxruntime_qnn import build_and_package_info as info

        if getattr(info, "qnn_version", None):
            out["qnn_sdk"] = str(info.qnn_version)
    except ImportError:
        pass
    return out


def _require_qnn() -> None:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        raise BuildError("HTP compilation needs the onnxruntime-qnn package (pip install onnxruntime-qnn)") from None


# ------------------------------------------------------------------------------------------------
# Compilation
# ------------------------------------------------------------------------------------------------

def _default_bin(ctx: Path) -> Path:
    return ctx.with_name(ctx.stem + "_qnn.bin")


def _provider_options(target: Target, fp16: bool, optimization_mode: int | None,
                      extra: dict[str, str] | None) -> dict[str, str]:
    opts = {"soc_model": str(target.soc_model), "htp_arch": str(target.htp_arch), "htp_performance_mode": "burst"}
    if fp16:
        opts["enable_htp_fp16_precision"] = "1"
    if optimization_mode is not None:
        opts["htp_graph_finalization_optimization_mode"] = str(optimization_mode)
    opts.update({k: str(v) for k, v in (extra or {}).items()})
    return opts


def compile_graphs(jobs: Sequence[tuple[str | Path, str | Path]], target: str | int | Target, fp16: bool = True,
                   shared: bool = False, optimization_mode: int | None = 3,
                   provider_options: dict[str, str] | None = None, keep_log: str | Path | None = None,
                   timeout: float | None = None) -> list[CompileReport]:
    """Compile (onnx_path, out_ctx_path) pairs for one target in one child process.

    `shared`: all graphs go into ONE context binary (named after the first graph's ctx file).
    Raises HTPCompileError (a BuildError) naming every node that did not go to HTP, and why.
    """
    _require_qnn()
    target = resolve_target(target)
    jobs = [(Path(o).resolve(), Path(c).resolve()) for o, c in jobs]
    if not jobs:
        raise BuildError("no graphs to compile")
    for onnx_path, ctx in jobs:
        if not onnx_path.is_file():
            raise BuildError(f"no such graph: {onnx_path}")
        if ctx.suffix != ".onnx":
            raise BuildError(f"the EPContext output must be an .onnx path, got {ctx}")
        ctx.parent.mkdir(parents=True, exist_ok=True)
        for stale in (ctx, _default_bin(ctx)):  # ORT refuses to overwrite an EPContext model
            stale.unlink(missing_ok=True)
    reports = [CompileReport(o, c, target, fp16, shared) for o, c in jobs]

    work = Path(tempfile.mkdtemp(prefix="hexrag-qnn-compile-"))
    log_path = work / "compile.log"
    spec = {"jobs": [{"onnx": str(o), "ctx": str(c)} for o, c in jobs], "shared": shared,
            "provider_options": _provider_options(target, fp16, optimization_mode, provider_options),
            "result": str(work / "result.json")}
    (work / "job.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    crashed = None
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run([sys.executable, "-m", "build_scripts.compile", "--worker", str(work / "job.json")],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
            if proc.returncode != 0:
                crashed = (f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}")
        except subprocess.TimeoutExpired:
            crashed = f"timeout after {timeout:g} s"

    results = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else []
    sections = _parse_log(log_path, len(jobs))
    for i, rep in enumerate(reports):
        _fill_report(rep, results[i] if i < len(results) else None, sections.get(i))
        if not rep.ok and rep.error is None:
            rep.error = (f"the QNN compiler died ({crashed})" if crashed and i == len(results) else
                         "not compiled (an earlier graph of the group failed)")
    if shared:
        for rep in reports:
            rep.group = reports

    failed = [r for r in reports if not r.ok]
    # ORT may write an EPContext model (with the CPU nodes in it) before it refuses the session;
    # a shared group is all-or-nothing
    for rep in (reports if shared and failed else failed):
        for stale in (rep.ctx_path, _default_bin(rep.ctx_path), *([rep.binary] if rep.binary else [])):
            stale.unlink(missing_ok=True)
        rep.binary = None
    kept = None
    if keep_log is not None:
        kept = Path(keep_log)
        shutil.copyfile(log_path, kept)
    elif failed:
        kept = log_path  # leave the work directory for the user to read
    for rep in reports:
        rep.log_path = kept
    if kept != log_path:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        raise HTPCompileError(_failure_message(failed, target, reports[0].log_path), reports)
    return reports


def compile_graph(onnx_path: str | Path, out_ctx_path: str | Path, soc_model: int | str | Target, fp16: bool = True,
                  share_group: Iterable[tuple[str | Path, str | Path]] | None = None, **kwargs) -> CompileReport:
    """Compile one graph to an EPContext model (+ external .bin) for `soc_model` (a QNN soc id,
    target name or Target). `share_group`: further (onnx, ctx) pairs that share this graph's
    weights; all go into one binary named after this graph, and `report.group` holds every
    graph's report. kwargs go to `compile_graphs`."""
    group = list(share_group or [])
    reports = compile_graphs([(onnx_path, out_ctx_path), *group], soc_model, fp16=fp16, shared=bool(group), **kwargs)
    return reports[0]


# ------------------------------------------------------------------------------------------------
# Log parsing
# ------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VALIDATION = re.compile(r"Validation (PASSED|FAILED) for \d+ nodes in \w+ \((\w+)\)")
_NODE = re.compile(r"Operator type: (\S+) Node name: (.*?) Node index: \d+")
_REASON = re.compile(r"^\s*REASON\s*:\s*(.*)$")
_UNSUPPORTED = re.compile(r"\{ name: (.*?), type: (\w+) \}")
_UNCREATED = re.compile(r'<E> "(.*?)" generated: could not create op')  # at finalize, after validation


@dataclass
class _Section:
    verdicts: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # node -> (verdict, op, reason)
    unsupported: dict[str, str] = field(default_factory=dict)  # node -> op
    errors: list[str] = field(default_factory=list)  # [E:] lines
    uncreated: list[str] = field(default_factory=list)  # nodes QNN could not create at finalize


def _parse_log(path: Path, n_jobs: int) -> dict[int, _Section]:
    sections: dict[int, _Section] = {}
    cur: _Section | None = None
    pending: list[str] = []  # node names of the last validation block
    verdict = ""
    with open(path, "r", errors="replace") as f:
        for raw in f:
            line = _ANSI.sub("", raw.rstrip("\n"))
            if line.startswith(_MARKER):
                parts = line.split()
                cur = sections.setdefault(int(parts[1]), _Section()) if parts[2] == "start" else None
                pending = []
                continue
            if cur is None:
                continue
            m = _VALIDATION.search(line)
            if m:
                verdict, pending = m.group(1), []
                continue
            m = _NODE.search(line)
            if m and verdict:
                op, name = m.group(1), m.group(2)
                cur.verdicts[name] = (verdict, op, "")
                pending.append(name)
                continue
            m = _REASON.match(line)
            if m and pending:
                for name in pending:
                    v, op, _ = cur.verdicts[name]
                    cur.verdicts[name] = (v, op, m.group(1).strip())
                continue
            m = _UNCREATED.search(line)
            if m:
                cur.uncreated.append(m.group(1))
                continue
            if "[E:" in line:
                cur.errors.append(re.sub(r"^.*?\[E:[^\]]*\]\s*", "", line).strip())
                for name, op in _UNSUPPORTED.findall(line):
                    cur.unsupported[name] = op
            if line.strip() == "":
                pending, verdict = [], ""
    return sections


def _fill_report(rep: CompileReport, result: dict | None, section: _Section | None) -> None:
    source = _source_nodes(rep.onnx_path)
    section = section or _Section()
    for name, (verdict, op, reason) in section.verdicts.items():
        rep.op_types[name] = op
        rep.placements[name] = "QNN" if verdict == "PASSED" else "CPU"
        if verdict == "FAILED":
            rep.rejected.append(NodeIssue(name, op, _short_reason(reason) or "rejected by QNN validation"))
    for name, op in section.unsupported.items():
        if name not in rep.placements or rep.placements[name] == "QNN":
            rep.placements[name] = "CPU"
            rep.op_types[name] = op
            if not any(r.name == name for r in rep.rejected):
                rep.rejected.append(NodeIssue(name, op, "not supported by the QNN EP"))
    rep.removed = [n for n in source if n not in rep.placements]
    if result is None:
        return
    rep.seconds = result.get("seconds")
    if result.get("ok"):
        rep.ok = True
        # CPU fallback is disabled: a session that exists runs every node on QNN
        for name in rep.placements:
            rep.placements[name] = "QNN"
        rep.rejected = []
        rep.binary, rep.sdk_version = _context_info(rep.ctx_path)
    else:
        rep.error = _one_line(result.get("error") or "session creation failed")
        rep.uncreated = list(dict.fromkeys(section.uncreated))
        if not rep.rejected:  # add what QNN itself logged as errors, if it said more than the exception
            extra = [e for e in dict.fromkeys(_one_line(x) for x in section.errors) if e and e not in rep.error]
            if extra:
                rep.error += " (QNN: " + "; ".join(extra[-2:]) + ")"


def _source_nodes(path: Path) -> list[str]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        return []
    return [n.name for n in model.graph.node]


def _context_info(ctx: Path) -> tuple[Path | None, str | None]:
    import onnx

    if not ctx.is_file():
        return None, None
    model = onnx.load(str(ctx), load_external_data=False)
    binary = sdk = None
    for node in model.graph.node:
        if node.op_type == "EPContext":
            for a in node.attribute:
                if a.name == "ep_cache_context" and binary is None:
                    binary = ctx.parent / a.s.decode()
                elif a.name == "ep_sdk_version":
                    sdk = a.s.decode()
    return binary, sdk


_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_SOURCE_LOC = re.compile(r"/\S+\.(?:cc|h|cpp):\d+\s+[^\[]*")


def _one_line(text: str) -> str:
    msg = _ORT_PREFIX.split(text)[-1]
    return " ".join(_SOURCE_LOC.sub("", msg).split())


def _short_reason(reason: str) -> str:
    # QNN glues a second sentence on without a space: "…by QNN EP.Trilu node `x` will not be …"
    return re.sub(r"\.(?=[A-Z])", ". ", reason).split(". ")[0].rstrip(".") if reason else ""


_HINTS = {
    "QNN_COMMON_ERROR_MEM_ALLOC": "the graph does not fit one HTP context (split the model into smaller parts), "
                                  "or the target's HTP has no float support (quantize first)",
}


def _failure_message(failed: list[CompileReport], target: Target, log_path: Path | None) -> str:
    parts = []
    for rep in failed:
        where = rep.onnx_path.name
        if rep.rejected:
            nodes = "; ".join(f"{r.name} ({r.op_type}: {r.reason})" for r in rep.rejected)
            parts.append(f"{where}: {len(rep.rejected)} node(s) cannot run on HTP: {nodes}")
        else:
            hint = next((h for k, h in _HINTS.items() if k in (rep.error or "")), "")
            if not target.float_ok and rep.fp16 and "MEM_ALLOC" in (rep.error or ""):
                hint = f"{target.name} (v{target.htp_arch}) has no float HTP: quantize the model first"
            if rep.uncreated:  # what QNN logged at finalize says more than its MEM_ALLOC code
                more = len(rep.uncreated) - 6
                hint = (f"QNN could not create {len(rep.uncreated)} node(s) that had passed validation for "
                        f"{target.name}: {', '.join(rep.uncreated[:6])}{f' and {more} more' if more > 0 else ''}")
            parts.append(f"{where}: {rep.error}" + (f" ({hint})" if hint else ""))
    return (f"HTP compile for {target.name} (soc {target.soc_model}, v{target.htp_arch}) failed: " + " | ".join(parts)
            + (f" [verbose log: {log_path}]" if log_path else ""))


# ------------------------------------------------------------------------------------------------
# Model directories
# ------------------------------------------------------------------------------------------------

def compile_model_dir(model_dir: str | Path, targets: Iterable[str | int | Target], shared: bool,
                      fp16: bool = True, part_budget: int | None = None, **kwargs) -> dict:
    """Compile every graph of a model directory's manifest into `htp/<target>/<shared|sim>/`.

    An LLM whose weights exceed `part_budget` bytes (default 1.5 GB) is split by layers into parts
    (build_scripts/split.py), each compiled on its own: with `shared`, one binary per part holds
    that part of every graph. Returns the proposed manifest `target` entry: the existing entry's
    builds (if it already is an HTP entry) plus the new ones, each with soc/arch, variant, files
    (a list of parts, run in order, for a split graph) and compile times.
    """
    from build_scripts.split import DEFAULT_PART_BUDGET, write_parts  # onnx: imported only to build
    from models.manifest import load_manifest

    model_dir = Path(model_dir).resolve()
    manifest = load_manifest(model_dir, verify=False)
    variant = "shared" if shared else "sim"
    versions = qnn_versions()
    ranges = _part_ranges(model_dir, manifest, part_budget or DEFAULT_PART_BUDGET, fp16)
    sources = {g.name: [model_dir / g.file] for g in manifest.graphs}
    if _lpbq(manifest.quantization, shared):
        kwargs["provider_options"] = {"enable_block_quant_weight_optimization": "1", **(kwargs.get("provider_options") or {})}
    builds = []
    try:
        if len(ranges) > 1:
            sources = {g.name: write_parts(model_dir, g.file, ranges, manifest.architecture["hidden"])
                       for g in manifest.graphs}
        for spec in targets:
            target = resolve_target(spec)
            out = model_dir / "htp" / target.name / variant
            shutil.rmtree(out, ignore_errors=True)
            share = shared and len(manifest.graphs) > 1
            reports: dict[str, list[CompileReport]] = {g.name: [] for g in manifest.graphs}
            for k in range(len(ranges)):
                jobs = [(sources[g.name][k], out / f"{sources[g.name][k].stem}_ctx.onnx") for g in manifest.graphs]
                for g, rep in zip(manifest.graphs, compile_graphs(jobs, target, fp16=fp16, shared=share, **kwargs)):
                    reports[g.name].append(rep)
            every = [r for rs in reports.values() for r in rs]
            sdk = next((r.sdk_version for r in every if r.sdk_version), None)
            if sdk:
                versions["qnn_build"] = sdk
            binaries = sorted({r.binary for r in every if r.binary})

            def files(rs: list[CompileReport]) -> str | list[str]:
                rel = [r.ctx_path.relative_to(model_dir).as_posix() for r in rs]
                return rel[0] if len(rel) == 1 else rel

            builds.append({
                "target": target.name, "chip": target.chip, "soc_model": target.soc_model, "htp_arch": target.htp_arch,
                "variant": variant, "shared_weights": share, "parts": len(ranges),
                "provider_options": dict(kwargs.get("provider_options") or {}),
                "part_layers": [[a, b - 1] for a, b in ranges],
                "graphs": {name: files(rs) for name, rs in reports.items()},
                "binaries": {b.relative_to(model_dir).as_posix(): b.stat().st_size for b in binaries},
                "compile_seconds": {name: round(sum(r.seconds or 0.0 for r in rs), 3) for name, rs in reports.items()},
                "placement": {name: {"htp": sum(len(r.htp_nodes) for r in rs), "cpu": sum(len(r.cpu_nodes) for r in rs)}
                              for name, rs in reports.items()},
            })
    finally:
        if len(ranges) > 1:
            for paths in sources.values():
                for path in paths:
                    path.unlink(missing_ok=True)
    previous = manifest.target.get("builds", []) if manifest.target.get("backend") == "htp" else []
    new_keys = {(b["target"], b["variant"]) for b in builds}
    merged = [b for b in previous if (b["target"], b["variant"]) not in new_keys] + builds
    return {"backend": "htp", "precision": "fp16" if fp16 else "fp32",
            "weights_bytes": (model_dir / manifest.weights_file).stat().st_size, "versions": versions,
            "builds": merged}


def _lpbq(quantization: dict | None, shared: bool) -> bool:
    """Whether to lower block-wise weights to LPBQ (int4 scales are LPBQ-exact: gptq.block_scales);
    without it QNN keeps float block scales, 2.3x slower in simulation (qnn-notes.md). Not for a
    GGUF's own int4 blocks (source_grid): LPBQ would re-round their scales and the weights with
    them. Not for int4 in the simulator's builds: it segfaults on int4 LPBQ MatMuls with an input
    dimension of 448-576 or 896 (SmolLM2's 576; docs/benchmarks.md), and float scales hold the
    LPBQ-exact ones as they are."""
    weights = (quantization or {}).get("weights") or {}
    blocked = weights.get("blocked") or {}
    int4 = [t for w, t in weights.get("tensors", {}).items() if w in blocked and t.get("type") == "int4"]
    return bool(blocked) and not any(t.get("rounding") == "source" for t in int4) and (shared or not int4)


def _part_ranges(model_dir: Path, manifest, budget: int, fp16: bool) -> list[tuple[int, int]]:
    """Layer ranges of the parts an LLM's graphs are cut into ([(0, layers)]: not split)."""
    n_layers = (manifest.architecture or {}).get("n_layers", 0)
    if manifest.kind != "llm" or (model_dir / manifest.weights_file).stat().st_size <= budget:
        return [(0, n_layers)]
    import onnx

    from build_scripts.split import plan_parts

    model = onnx.load(str(model_dir / manifest.graphs[0].file), load_external_data=False)
    return plan_parts(model, budget, fp16=fp16)


def record_target(model_dir: str | Path, entry: dict) -> None:
    """Write a `compile_model_dir` entry into the manifest and re-hash the directory's files."""
    from models.manifest import hash_directory, load_manifest

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir, verify=False)
    manifest.target = entry
    manifest.files = hash_directory(model_dir)
    manifest.save(model_dir)


# ------------------------------------------------------------------------------------------------
# The child process
# ------------------------------------------------------------------------------------------------

def _worker(job_file: str) -> int:
    import onnxruntime as ort
    import onnxruntime_qnn

    spec = json.loads(Path(job_file).read_text())
    ort.set_default_logger_severity(0)
    if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
        ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    npu = [d for d in devices if d.device.type == ort.OrtHardwareDeviceType.NPU]
    devices = npu or devices[:1]
    options = {"backend_path": onnxruntime_qnn.get_qnn_htp_path(), **spec["provider_options"]}
    results = []
    jobs = spec["jobs"]
    for i, job in enumerate(jobs):
        os.write(2, f"\n{_MARKER} {i} start {job['onnx']}\n".encode())
        so = ort.SessionOptions()
        so.log_severity_level = 0
        so.log_verbosity_level = 0
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", job["ctx"])
        so.add_session_config_entry("ep.context_embed_mode", "0")
        if spec["shared"]:
            so.add_session_config_entry("ep.share_ep_contexts", "1")
            if i == len(jobs) - 1:
                so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
        so.add_provider_for_devices(devices, options)
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(job["onnx"], so)
            ok, error = EP_NAME in session.get_providers(), None
            del session
        except Exception as e:  # noqa: BLE001
            ok, error = False, str(e)
        results.append({"ok": ok, "error": error, "seconds": time.perf_counter() - start})
        os.write(2, f"\n{_MARKER} {i} end\n".encode())
        tmp = spec["result"] + ".tmp"
        Path(tmp).write_text(json.dumps(results))
        os.replace(tmp, spec["result"])
        if not ok and spec["shared"]:
            break
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2]))
    print("usage: python -m build_scripts.compile --worker JOB.json (internal)", file=sys.stderr)
    sys.exit(2)
