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

The QNN EP is set up as the runtime sets it up (runtime/qnn.py: registration, device, provider
options, versions, EPContext inspection); the targets are runtime/qnn_targets.py's table; what
the compiler logged is read by build_scripts/compile_log.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

from build_scripts.compile_log import MARKER, CompileReport, failure_message, fill_report, parse_log
from build_scripts.errors import BuildError
from models.manifest import Manifest, QuantizationSpec, TargetBuild, TargetSpec, load_manifest, seal
from runtime import qnn
from runtime.errors import RuntimeModelError
from runtime.qnn_targets import Target, resolve_target


class HTPCompileError(BuildError):
    """Some graph did not compile entirely for HTP; `.reports` says which nodes and why."""

    def __init__(self, message: str, reports: list[CompileReport]):
        super().__init__(message)
        self.reports = reports


def _require_qnn() -> None:
    try:
        qnn.register()
    except RuntimeModelError as e:  # no onnxruntime-qnn: said as a build error
        raise BuildError(str(e)) from None


# ------------------------------------------------------------------------------------------------
# Compilation
# ------------------------------------------------------------------------------------------------

def _default_bin(ctx: Path) -> Path:
    return ctx.with_name(ctx.stem + "_qnn.bin")


def _provider_options(target: Target, fp16: bool, optimization_mode: int | None,
                      extra: dict[str, str] | None) -> dict[str, str]:
    more = {"htp_graph_finalization_optimization_mode": str(optimization_mode)} if optimization_mode is not None else {}
    return qnn.provider_options(soc_model=target.soc_model, htp_arch=target.htp_arch, fp16=fp16,
                                extra={**more, **(extra or {})})


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
    sections = parse_log(log_path, len(jobs))
    for i, rep in enumerate(reports):
        fill_report(rep, results[i] if i < len(results) else None, sections.get(i))
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
        raise HTPCompileError(failure_message(failed, target, reports[0].log_path), reports)
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
# Model directories
# ------------------------------------------------------------------------------------------------

def compile_model_dir(model_dir: str | Path, targets: Iterable[str | int | Target], shared: bool,
                      fp16: bool = True, part_budget: int | None = None, manifest: Manifest | None = None,
                      **kwargs) -> TargetSpec:
    """Compile every graph of a model directory's manifest into `htp/<target>/<shared|sim>/`.

    An LLM whose weights exceed `part_budget` bytes (default 1.5 GB) is split by layers into parts
    (build_scripts/split.py), each compiled on its own: with `shared`, one binary per part holds
    that part of every graph. Returns the proposed manifest `target` entry: the existing entry's
    builds (if it already is an HTP entry) plus the new ones, each with soc/arch, variant, files
    (a list of parts, run in order, for a split graph) and compile times. `manifest`: the
    directory's, as a build holds it before writing it (default: read from the directory).
    """
    from build_scripts.split import DEFAULT_PART_BUDGET, write_parts  # onnx: imported only to build

    model_dir = Path(model_dir).resolve()
    manifest = manifest or load_manifest(model_dir, verify=False)
    variant = "shared" if shared else "sim"
    versions = qnn.versions()
    ranges = _part_ranges(model_dir, manifest, part_budget or DEFAULT_PART_BUDGET, fp16)
    sources = {g.name: [model_dir / g.file] for g in manifest.graphs}
    if _lpbq(manifest.quantization, shared):
        kwargs["provider_options"] = {"enable_block_quant_weight_optimization": "1", **(kwargs.get("provider_options") or {})}
    builds = []
    try:
        if len(ranges) > 1:
            sources = {g.name: write_parts(model_dir, g.file, ranges, manifest.architecture.hidden)
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

            builds.append(TargetBuild(
                target=target.name, chip=target.chip, soc_model=target.soc_model, htp_arch=target.htp_arch,
                variant=variant, shared_weights=share, parts=len(ranges),
                provider_options=dict(kwargs.get("provider_options") or {}),
                part_layers=[[a, b - 1] for a, b in ranges],
                graphs={name: files(rs) for name, rs in reports.items()},
                binaries={b.relative_to(model_dir).as_posix(): b.stat().st_size for b in binaries},
                compile_seconds={name: round(sum(r.seconds or 0.0 for r in rs), 3) for name, rs in reports.items()},
                placement={name: {"htp": sum(len(r.htp_nodes) for r in rs), "cpu": sum(len(r.cpu_nodes) for r in rs)}
                           for name, rs in reports.items()},
            ))
    finally:
        if len(ranges) > 1:
            for paths in sources.values():
                for path in paths:
                    path.unlink(missing_ok=True)
    previous = manifest.target.htp_builds
    new_keys = {(b.target, b.variant) for b in builds}
    merged = [b for b in previous if (b.target, b.variant) not in new_keys] + builds
    return TargetSpec(backend="htp", precision="fp16" if fp16 else "fp32",
                      weights_bytes=(model_dir / manifest.weights_file).stat().st_size, versions=versions, builds=merged)


def _lpbq(quantization: QuantizationSpec, shared: bool) -> bool:
    """Whether to lower block-wise weights to LPBQ (int4 scales are LPBQ-exact: gptq.block_scales);
    without it QNN keeps float block scales, 2.3x slower in simulation (qnn-notes.md). Not for a
    GGUF's own int4 blocks (source_grid): LPBQ would re-round their scales and the weights with
    them. Not for int4 in the simulator's builds: it segfaults on int4 LPBQ MatMuls with an input
    dimension of 448-576 or 896 (SmolLM2's 576; docs/benchmarks.md), and float scales hold the
    LPBQ-exact ones as they are."""
    if quantization.ptq is None:
        return False
    weights = quantization.ptq.weights
    int4 = [t for w, t in weights.tensors.items() if w in weights.blocked and t.type == "int4"]
    return bool(weights.blocked) and not any(t.rounding == "source" for t in int4) and (shared or not int4)


def _part_ranges(model_dir: Path, manifest, budget: int, fp16: bool) -> list[tuple[int, int]]:
    """Layer ranges of the parts an LLM's graphs are cut into ([(0, layers)]: not split)."""
    n_layers = manifest.architecture.n_layers
    if manifest.kind != "llm" or (model_dir / manifest.weights_file).stat().st_size <= budget:
        return [(0, n_layers)]
    import onnx

    from build_scripts.split import plan_parts

    model = onnx.load(str(model_dir / manifest.graphs[0].file), load_external_data=False)
    return plan_parts(model, budget, fp16=fp16)


def record_target(model_dir: str | Path, entry: TargetSpec) -> None:
    """Write a `compile_model_dir` entry into the manifest and re-hash the directory's files."""
    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir, verify=False)
    manifest.target = entry
    seal(model_dir, manifest)


# ------------------------------------------------------------------------------------------------
# The child process
# ------------------------------------------------------------------------------------------------

def _worker(job_file: str) -> int:
    import onnxruntime as ort

    spec = json.loads(Path(job_file).read_text())
    ort.set_default_logger_severity(0)
    results = []
    jobs = spec["jobs"]
    for i, job in enumerate(jobs):
        os.write(2, f"\n{MARKER} {i} start {job['onnx']}\n".encode())
        # the runtime's QNN session (runtime/qnn.py), at log severity 0 (compile_log.py reads what QNN
        # says per node), writing the EPContext model instead of only running it
        config = {"ep.context_enable": "1", "ep.context_file_path": job["ctx"], "ep.context_embed_mode": "0"}
        if spec["shared"]:
            config["ep.share_ep_contexts"] = "1"
            if i == len(jobs) - 1:
                config["ep.stop_share_ep_contexts"] = "1"
        so = qnn.session_options(spec["provider_options"], log_level=0, config=config)
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(job["onnx"], so)
            ok, error = qnn.EP_NAME in session.get_providers(), None
            del session
        except Exception as e:  # noqa: BLE001
            ok, error = False, str(e)
        results.append({"ok": ok, "error": error, "seconds": time.perf_counter() - start})
        os.write(2, f"\n{MARKER} {i} end\n".encode())
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
