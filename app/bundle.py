"""A device bundle: one self-contained folder to copy onto a Snapdragon device and serve from.

Layout:
    bundle.json          what the bundle is for (target SoC, HTP arch, versions, CPU fallback or not)
    SHA256SUMS           sha256 of every other file (`sha256sum -c SHA256SUMS` checks it too)
    models/llm/          manifest-verified copies of the model directories holding only the target's
    models/embedder/     HTP build (+ the ONNX graphs and weights when a CPU fallback was asked for)
    models/second-embedder/  the same of the KB's second embedder, when it has one
    kb/                  the knowledge base as exported (a pristine seed, never written)
    src/                 hexrag's own code; requirements.txt pins its dependencies as installed here
    start.sh, README.md  how to run it on the device
    data/                made on the device: the working copy of the KB (not checksummed)

`hexrag serve --bundle B` verifies every checksum (and refuses files nobody listed), refuses a
bundle built for another SoC, then serves with the NPU or, if the bundle has one, the CPU fallback.
"""

from __future__ import annotations

import platform
import re
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import datetime, timezone
from importlib import metadata, resources
from pathlib import Path

from pydantic import BaseModel, ValidationError

from app.device import (ARM64, SOC0, BackendChoice, HtpStatus, choose_backend, device_build, is_qualcomm, probe_htp,
                        read_soc)
from app.settings import Settings
from runtime.qnn_targets import resolve_target
from models.manifest import build_files, first_mismatch, load_manifest, package_versions, sha256_file
from runtime.errors import RuntimeModelError

BUNDLE_FILE = "bundle.json"
CHECKSUMS = "SHA256SUMS"
DATA_DIR = "data"  # written on the device; outside the checksums
KB_SEED = "kb.seed"  # in data/: the sha256 of the bundle's kb.sqlite that data/kb was copied from
# never part of what was exported: the device's own state, a virtualenv made inside the bundle, bytecode
UNLISTED_OK = (DATA_DIR + "/", ".venv/")
LLM_DIR, EMBEDDER_DIR, KB_DIR, SRC_DIR = "models/llm", "models/embedder", "kb", "src"
SECOND_EMBEDDER_DIR = "models/second-embedder"
PACKAGES = ("app", "models", "runtime", "knowledge", "build_scripts")
DATA_DIRS = {"static", "samples"}  # package data outside Python packages (the web page, the sample KB)
FORMAT = 1


class BundleError(Exception):
    """A bundle that cannot be made, is altered, or is not for this machine; the message says why."""


class BundleSpec(BaseModel):
    format: int = FORMAT
    created: str
    target: str
    chip: str
    soc_model: int
    htp_arch: int
    variant: str  # the HTP build variant inside ("shared": prefill and decode share one weights binary)
    cpu_fallback: bool
    llm: str = LLM_DIR
    embedder: str = EMBEDDER_DIR
    second_embedder: str | None = None  # SECOND_EMBEDDER_DIR for a KB with a second embedder's vectors
    kb: str = KB_DIR
    versions: dict[str, str]


# ---- export --------------------------------------------------------------------------------------

def export_bundle(llm: Path, embedder: Path, kb: Path, target: str, out: Path, cpu_fallback: bool = False,
                  second_embedder: Path | None = None) -> BundleSpec:
    """Write a bundle for `target` into `out` (which must not exist yet; a failure leaves nothing behind).
    `second_embedder`: the KB's second embedder, which a KB holding its vectors needs."""
    t = resolve_target(target)
    out = Path(out)
    if out.exists():
        raise BundleError(f"{out} exists already; choose a new --out or remove it")
    tmp = out.parent / f".{out.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        variants = {_copy_model(Path(llm), tmp / LLM_DIR, t.name, cpu_fallback),
                    _copy_model(Path(embedder), tmp / EMBEDDER_DIR, t.name, cpu_fallback)}
        if second_embedder is not None:
            variants.add(_copy_model(Path(second_embedder), tmp / SECOND_EMBEDDER_DIR, t.name, cpu_fallback))
        _copy_kb(Path(kb), tmp / KB_DIR, Path(embedder), second_embedder and Path(second_embedder))
        _copy_sources(tmp / SRC_DIR)
        spec = BundleSpec(created=datetime.now(timezone.utc).isoformat(timespec="seconds"), target=t.name, chip=t.chip,
                          soc_model=t.soc_model, htp_arch=t.htp_arch, variant="/".join(sorted(variants)),
                          cpu_fallback=cpu_fallback, versions=_versions(),
                          second_embedder=SECOND_EMBEDDER_DIR if second_embedder is not None else None)
        (tmp / BUNDLE_FILE).write_text(spec.model_dump_json(indent=2) + "\n")
        (tmp / "requirements.txt").write_text(requirements())
        (tmp / "start.sh").write_text(START_SH)
        (tmp / "start.sh").chmod(0o755)
        (tmp / "README.md").write_text(_readme(spec))
        sums = {rel: sha256_file(tmp / rel) for rel in _files(tmp)}
        (tmp / CHECKSUMS).write_text("".join(f"{h}  {rel}\n" for rel, h in sorted(sums.items())))
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return spec


def _copy_model(src: Path, dst: Path, target: str, cpu_fallback: bool) -> str:
    """Copy the files of `src` that `target` needs, each checked against the source manifest's sha256;
    the copy's manifest lists exactly those files and the one build. Returns the build's variant."""
    m = load_manifest(src)  # refuses an altered source
    build = device_build(m.target, target)
    if build is None:
        raise BundleError(f"{src} has no {target} HTP build: compile it first "
                          f"(hexrag compile {src} --target {target} --variant shared)")
    wanted = [m.tokenizer.file, *([m.tokenizer.chat_template] if m.tokenizer.chat_template else []), *build.binaries]
    wanted += [f for entry in build.graphs.values() for f in build_files(entry)]
    if cpu_fallback:
        if m.target.precision == "external":
            raise BundleError(f"{src} holds only QNN context binaries: it has no CPU graphs for a CPU fallback")
        wanted += [g.file for g in m.graphs] + [m.weights_file]
    files = {}
    for rel in dict.fromkeys(wanted):
        if rel not in m.files:
            raise BundleError(f"{src}: {rel} is not in its manifest's file list; rebuild the model")
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dst / rel)
        if sha256_file(dst / rel) != m.files[rel]:
            raise BundleError(f"{rel} changed while it was copied from {src}")
        files[rel] = m.files[rel]
    m.target = m.target.model_copy(update={"builds": [build]})
    m.files = files
    m.save(dst)
    load_manifest(dst)  # the copy is a model directory the runtime accepts
    return build.variant


def _copy_kb(src: Path, dst: Path, embedder: Path, second: Path | None) -> None:
    """The KB's SQLite file through SQLite's backup (a consistent copy with its write-ahead log folded
    in), then its derived index files; refused when it was embedded with another model, or holds a second
    embedder's vectors and `second` is not that model."""
    from runtime.embedder import Embedder

    db = src / "kb.sqlite"
    if not db.is_file():
        raise BundleError(f"{src} is not a knowledge-base directory (no kb.sqlite)")
    dst.mkdir(parents=True)
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as source, \
            closing(sqlite3.connect(dst / "kb.sqlite")) as copy:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file (the device's copy goes back to WAL)
        meta = dict(copy.execute("SELECT key, value FROM meta WHERE key IN ('model_id', 'second_model_id')"))
    model_id = Embedder(embedder, verify=False).model_id
    if meta.get("model_id", model_id) != model_id:
        raise BundleError(f"the KB at {src} was embedded with {meta['model_id']}, the embedder {embedder} is "
                          f"{model_id}")
    held = meta.get("second_model_id")
    given = Embedder(second, verify=False).model_id if second is not None else None
    if held != given:
        if given is None:
            why = f"holds second embedder vectors of {held}: pass that embedder's build with --second-embedder"
        elif held is None:
            why = f"holds no second embedder vectors: add them first (`hexrag kb rebuild --second-embedder {second}`)"
        else:
            why = f"holds second embedder vectors of {held}, the second embedder {second} is {given}"
        raise BundleError(f"the KB at {src} {why}")
    for p in src.iterdir():
        if p.is_file() and not p.name.startswith("kb.sqlite"):
            shutil.copyfile(p, dst / p.name)


def _copy_sources(dst: Path) -> None:
    """hexrag's packages as they run here: Python files and the package data (web page, samples),
    not built model directories that may sit inside `models/`."""
    for pkg in PACKAGES:
        root = Path(str(resources.files(pkg)))
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts:
                continue
            if (path.parent / "__init__.py").is_file() or DATA_DIRS & set(rel.parts[:-1]):
                (dst / pkg / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dst / pkg / rel)


def requirements() -> str:
    """hexrag's runtime dependencies pinned to the versions installed here (pip on aarch64 Linux
    finds wheels for every one of them: onnxruntime-qnn ships manylinux_2_34_aarch64)."""
    try:
        declared = metadata.requires("hexrag") or []
    except metadata.PackageNotFoundError:
        raise BundleError("hexrag is not installed (pip install -e .): its dependency list is unknown") from None
    lines = ["# hexrag's dependencies as installed where this bundle was made; Python >= 3.11"]
    for req in declared:
        if "extra ==" in req:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
        marker = req.split(";", 1)[1].strip() if ";" in req else ""
        version = package_versions(name).get(name)
        if version is None:
            continue  # not for this platform (its marker excluded it here)
        lines.append(f"{name}=={version}" + (f"; {marker}" if marker else ""))
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str]:
    out = package_versions("hexrag", "onnxruntime", "onnxruntime-qnn")
    out["python"] = platform.python_version()
    try:
        from runtime import qnn

        out.update({k: v for k, v in qnn.versions().items() if k == "qnn_sdk"})
    except RuntimeModelError:  # no onnxruntime-qnn here: the bundle records what it knows
        pass
    return out


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


# ---- load ----------------------------------------------------------------------------------------

def verify_bundle(bundle: Path) -> BundleSpec:
    """Check every file against SHA256SUMS, refuse files it does not list, read bundle.json."""
    bundle = Path(bundle)
    sums_file = bundle / CHECKSUMS
    if not sums_file.is_file():
        raise BundleError(f"{bundle} is not a hexrag bundle (no {CHECKSUMS}); make one with `hexrag export bundle`")
    listed = _listed(bundle)
    if bad := first_mismatch(bundle, listed):
        rel, missing = bad
        raise BundleError(f"{bundle}: {rel} is missing" if missing else
                          f"{bundle}: {rel} was altered (sha256 mismatch); copy the bundle again")
    extra = [rel for rel in _files(bundle) if rel not in listed and rel != CHECKSUMS and not rel.startswith(UNLISTED_OK)]
    if extra:
        raise BundleError(f"{bundle}: {extra[0]} is not part of the bundle (not in {CHECKSUMS}); remove it")
    try:
        return BundleSpec.model_validate_json((bundle / BUNDLE_FILE).read_text())
    except (OSError, ValidationError) as e:
        raise BundleError(f"{bundle}/{BUNDLE_FILE} is unreadable ({str(e).splitlines()[0]})") from None


def _listed(bundle: Path) -> dict[str, str]:
    """SHA256SUMS as {relative path: sha256}."""
    listed = {}
    for line in (bundle / CHECKSUMS).read_text().splitlines():
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    return listed


def bundle_settings(bundle: Path, settings: Settings, *, machine: str | None = None, sysfs: Path = SOC0,
                    probe: Callable[[], HtpStatus] | None = None) -> tuple[Settings, BackendChoice]:
    """Settings that serve from a verified bundle, with the backend decided: the NPU when this is the
    bundle's SoC, else the CPU fallback if the bundle has one; `backend` defaults to auto here."""
    bundle = Path(bundle).resolve()
    spec = verify_bundle(bundle)
    machine = machine or platform.machine()
    soc = read_soc(sysfs)
    requested = settings.backend if "backend" in settings.model_fields_set else "auto"
    here = soc.target if machine.lower() in ARM64 and is_qualcomm(soc) else None
    if requested != "cpu" and here and here != spec.target:
        raise BundleError(f"this bundle is for {spec.target} ({spec.chip}); this device is {here} ({soc.chip}): "
                          f"export one with --target {here}")
    models = [bundle / spec.llm, bundle / spec.embedder]
    models += [bundle / spec.second_embedder] if spec.second_embedder else []
    if requested == "cpu":
        choice = BackendChoice(backend="cpu", reason="asked for")
    elif requested == "htp":
        if not here:
            raise BundleError(f"this bundle's HTP binaries run on a {spec.chip} NPU; this {machine} machine has none"
                              + (" (the x86 simulator cannot load shared-weight binaries)" if not soc else ""))
        choice = BackendChoice(backend="htp", target=spec.target, reason=f"asked for; {spec.chip}")
    else:
        choice = choose_backend(models, machine=machine, soc=soc, probe=probe or (lambda: probe_htp(soc)))
    if choice.backend == "cpu" and not spec.cpu_fallback:
        raise BundleError(f"this bundle has HTP binaries for {spec.target} only and cannot run here "
                          f"({choice.reason}); export it with --cpu-fallback to run on the CPU")
    settled = settings.model_copy(update={"llm": models[0], "embedder": models[1], "kb": _working_kb(bundle, spec),
                                          "second_embedder": models[2] if spec.second_embedder else None,
                                          "backend": choice.backend, "qnn_target": spec.target})
    return settled, choice


def _working_kb(bundle: Path, spec: BundleSpec) -> Path:
    """The KB the server writes to: a copy of the bundle's own, made on first start, so that the
    checksummed seed never changes. A newer bundle copied over this one (rsync, adb push) keeps
    data/, so the copy remembers which seed it came from: serving the old copy would hide the new KB."""
    work, mark = bundle / DATA_DIR / "kb", bundle / DATA_DIR / KB_SEED
    seed = _listed(bundle)[f"{spec.kb}/kb.sqlite"]
    if not work.is_dir():
        shutil.copytree(bundle / spec.kb, work.parent / ".kb.partial", dirs_exist_ok=True)
        mark.write_text(seed + "\n")  # before the rename: a copy in place always has its mark
        (work.parent / ".kb.partial").rename(work)
    elif not mark.is_file() or mark.read_text().strip() != seed:
        raise BundleError(f"{work} was copied from another knowledge base than this bundle's {spec.kb}/ (a newer "
                          f"bundle was copied over an older one): move {bundle / DATA_DIR} aside to start from "
                          f"this bundle's KB (documents uploaded here are in its kb/uploads)")
    return work


# ---- the files for people ------------------------------------------------------------------------

START_SH = """#!/bin/sh
# Serve hexrag from this bundle: every file's sha256 is checked first. Arguments go to `hexrag serve`
# (e.g. --host 0.0.0.0 --api-key KEY, --backend cpu|htp|auto). $PYTHON picks the interpreter.
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-$HERE/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYTHONPATH="$HERE/src${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m app.cli serve --bundle "$HERE" "$@"
"""


def _readme(spec: BundleSpec) -> str:
    fallback = ("The bundle also holds the ONNX graphs for the CPU fallback: `--backend cpu`, or `auto` where the "
                "NPU is unavailable." if spec.cpu_fallback else
                "It holds no CPU fallback: it runs only on the NPU (export with `--cpu-fallback` to add one).")
    return f"""# hexrag bundle for {spec.chip} ({spec.target}, QNN soc_model {spec.soc_model}, HTP v{spec.htp_arch})

Made {spec.created} with {', '.join(f'{k} {v}' for k, v in spec.versions.items())}. HTP build: {spec.variant}.
{fallback}

## aarch64 Linux (Qualcomm Linux, Ubuntu or Debian on a Snapdragon board or laptop)

Needs Python >= 3.11, glibc >= 2.34 (the onnxruntime-qnn wheel is manylinux_2_34_aarch64), the
FastRPC device node (`/dev/fastrpc-cdsp`, readable by your user) and the vendor's `libcdsprpc.so`.

```sh
cd bundle
sha256sum -c --quiet SHA256SUMS            # optional: start.sh checks it too
python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
PYTHONPATH=src .venv/bin/python -m app.cli device --model models/llm   # is the NPU used, and why
./start.sh                                  # http://127.0.0.1:8000/ ; ./start.sh --host 0.0.0.0 --api-key KEY
```

## Android (Termux)

Termux's Python is built on Android's own C library, for which PyPI has no onnxruntime or
onnxruntime-qnn wheels: run the bundle in a Debian userland inside Termux instead. The QNN HTP
backend of the Linux wheel needs a glibc build of the FastRPC library (libcdsprpc.so), which Android
does not ship, so on Android the bundle runs on the CPU: export it with `--cpu-fallback`.

```sh
pkg install proot-distro && proot-distro install debian && proot-distro login debian
apt update && apt install -y python3 python3-venv
cd /sdcard/bundle   # or wherever it was copied (termux-setup-storage gives Termux the shared storage)
python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
./start.sh --backend cpu
```

Every file is listed in `SHA256SUMS`; the server refuses to start when one is missing, altered or
unlisted. The knowledge base it writes to lives in `data/kb` (made from `kb/` on the first start; after a
newer bundle with another `kb/` is copied over this folder, move `data/` aside to start from the new KB).
"""
