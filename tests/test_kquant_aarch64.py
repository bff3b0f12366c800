"""The K-quant library's aarch64 paths (NEON, NEON with the dot-product instructions) built by a cross
compiler and run under qemu's user-mode emulation, against the same numpy reference as the x86 paths
(tests/test_kquant.py): the library with a small driver (tests/fixtures/kquant_driver.c) per CPU model,
"max" (every extension, dot products too) and "cortex-a53" (Advanced SIMD alone), which must refuse
the dot-product path and pick NEON by itself. Skipped where the cross compiler or qemu-user is missing
(.ci/run installs both)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from runtime import kquant
from tests.test_kquant import TYPES, random_blocks, reference

ROOT = Path(__file__).resolve().parents[1]
CC, QEMU = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's cross C library, for qemu's -L

pytestmark = pytest.mark.skipif(not (CC and QEMU and SYSROOT.is_dir()),
                                reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("aarch64") / "kquant_driver"
    subprocess.run([CC, "-O3", "-std=c11", "-Wall", "-Wextra", "-Werror", str(ROOT / "tests/fixtures/kquant_driver.c"),
                    str(ROOT / "runtime/kquant/kquant.c"), "-lm", "-o", str(out)], check=True)
    return out


def run(driver: Path, cpu: str, path: str | None, ggml_type: int, blocks: np.ndarray, n: int, k: int,
        x: np.ndarray, tmp_path: Path) -> tuple[subprocess.CompletedProcess, np.ndarray | None]:
    given, got = tmp_path / "in.bin", tmp_path / "out.bin"
    with open(given, "wb") as f:
        f.write(np.array([ggml_type, n, k, x.shape[0], blocks.nbytes], np.int64).tobytes())
        f.write(blocks.tobytes())
        f.write(np.ascontiguousarray(x, np.float32).tobytes())
    number = -1 if path is None else kquant.PATHS.index(path)
    done = subprocess.run([QEMU, "-cpu", cpu, "-L", str(SYSROOT), str(driver), str(given), str(got), str(number)],
                          capture_output=True, text=True, timeout=120)
    y = np.fromfile(got, np.float32).reshape(x.shape[0], n) if done.returncode == 0 else None
    return done, y


@pytest.mark.parametrize("cpu, path", [("max", "dotprod"), ("max", "neon"), ("cortex-a53", "neon"),
                                       ("max", "scalar")])
@pytest.mark.parametrize("ggml_type", list(TYPES))
def test_each_aarch64_path_equals_the_dequantized_product(driver, tmp_path, cpu, path, ggml_type):
    rng = np.random.default_rng(ggml_type)
    n, k = 9, 256 * 12 if kquant.BLOCK_VALUES[ggml_type] == 256 else 32 * 18
    blocks = random_blocks(ggml_type, n, k, rng)
    for m in (1, 3, 4, 9):  # one token, a weight block shared by 3 and 4, and rows past a call's four
        x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
        x[0, :256] = 0  # an all-zero block of activations
        done, y = run(driver, cpu, path, ggml_type, blocks, n, k, x, tmp_path)
        assert done.returncode == 0, done.stderr
        ref = reference(blocks, ggml_type, n, k, x)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), err_msg=f"{path} m={m}")


@pytest.mark.parametrize("cpu, best", [("max", "dotprod"), ("cortex-a53", "neon")])
def test_the_library_picks_the_path_the_cpu_has(driver, tmp_path, cpu, best):
    rng = np.random.default_rng(3)
    blocks, x = random_blocks(kquant.Q4_K, 2, 256, rng), rng.standard_normal((1, 256)).astype(np.float32)
    done, _ = run(driver, cpu, None, kquant.Q4_K, blocks, 2, 256, x, tmp_path)
    assert done.returncode == 0 and kquant.PATHS[int(done.stdout)] == best
    if best == "neon":  # the dot-product instructions would be illegal here: refused, not run
        done, _ = run(driver, cpu, "dotprod", kquant.Q4_K, blocks, 2, 256, x, tmp_path)
        assert done.returncode == 3 and kquant.PATHS[int(done.stdout)] == "neon"
