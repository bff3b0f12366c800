"""The K-quant kernel library: matrix products on GGUF Q4_K / Q5_K / Q6_K / Q4_1 / Q8_0 blocks as stored.

`kquant.c` is built by the package's own build (`pip install -e .`, setup.py) into `_kquant*.so`
next to this file; a machine without a C compiler gets no library, a line in pip's log, and the
MatMulNBits graphs instead. The library is both an ONNX Runtime custom-op library (`register`
adds the ops `hexrag.KQuantMatMul` and `hexrag.KQuantGather` to a session) and a plain C library
(`matmul`, `gather`, for tests and tools). Which path it runs (AVX-512 VNNI, AVX-VNNI, AVX2; on aarch64
NEON with or without the dot-product instructions; or portable C) is decided when it loads, from what
this CPU reports.
"""

from __future__ import annotations

import ctypes
import functools
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import numpy as np

DOMAIN = "hexrag"
OP = "KQuantMatMul"
GATHER_OP = "KQuantGather"
OPS = (OP, GATHER_OP)
Q4_1, Q8_0, Q4_K, Q5_K, Q6_K = 3, 8, 12, 13, 14  # GGML's type numbers, the op's `ggml_type`
BLOCK_VALUES = {Q4_1: 32, Q8_0: 32, Q4_K: 256, Q5_K: 256, Q6_K: 256}  # values per block: K is a multiple of it
PATHS = ("scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod")  # the library's path numbers, in order


def library_path() -> Path | None:
    """The built library, or None when the build had no compiler."""
    here = Path(__file__).parent
    for suffix in EXTENSION_SUFFIXES:
        if (path := here / f"_kquant{suffix}").is_file():
            return path
    return None


@functools.cache
def _lib() -> ctypes.CDLL | None:
    path = library_path()
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    lib.hexrag_kq_path.restype = ctypes.c_int
    lib.hexrag_kq_path_available.argtypes = [ctypes.c_int]
    lib.hexrag_kq_path_available.restype = ctypes.c_int
    lib.hexrag_kq_force_path.argtypes = [ctypes.c_int]
    lib.hexrag_kq_force_path.restype = ctypes.c_int
    lib.hexrag_kq_matmul.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_float]
    lib.hexrag_kq_matmul.restype = ctypes.c_char_p
    lib.hexrag_kq_gather.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.hexrag_kq_gather.restype = ctypes.c_char_p
    return lib


def available() -> bool:
    return library_path() is not None


# the paths measured faster than ONNX Runtime's own int4 kernels (docs/benchmarks.md). The portable C path
# is for correctness, not speed; the NEON ones run a model built with the kernels on another machine (a
# device's CPU fallback), but an aarch64 build keeps MatMulNBits until they are measured on a device.
FASTER_THAN_ORT = ("avx2", "avxvnni", "avx512")


def preferred() -> bool:
    """The kernels are built and run a path here that beats ONNX Runtime's own: builds should use them."""
    return available() and kernel_path() in FASTER_THAN_ORT


def kernel_path() -> str | None:
    """The path the library runs here (one of PATHS), None without a library."""
    lib = _lib()
    return None if lib is None else PATHS[lib.hexrag_kq_path()]


def paths_here() -> list[str]:
    """Every path this CPU runs, the portable one first and the one in use by default last."""
    lib = _require()
    return [p for i, p in enumerate(PATHS) if lib.hexrag_kq_path_available(i)]


def force_path(name: str) -> str:
    """Run another path than the best one (tests); a path this CPU lacks is refused. Returns the path
    in use."""
    return PATHS[_require().hexrag_kq_force_path(PATHS.index(name))]


def matmul(blocks: np.ndarray, ggml_type: int, n: int, k: int, x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """x [m, k] float32 times the n rows of `blocks` (uint8 [n, k/block · block bytes]), on this thread."""
    lib = _require()
    blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != k:
        raise ValueError(f"x must be [m, {k}], got {list(x.shape)}")
    y = np.empty((x.shape[0], n), np.float32)
    err = lib.hexrag_kq_matmul(ggml_type, blocks.ctypes.data, blocks.nbytes, n, k, x.ctypes.data, x.shape[0],
                               y.ctypes.data, alpha)
    if err is not None:
        raise ValueError(err.decode())
    return y


def gather(blocks: np.ndarray, ggml_type: int, n: int, k: int, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` of the n rows of `blocks`, as float32 [len(ids), k] (what KQuantGather does)."""
    lib = _require()
    blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    y = np.empty((ids.size, k), np.float32)
    err = lib.hexrag_kq_gather(ggml_type, blocks.ctypes.data, blocks.nbytes, n, k, ids.ctypes.data, ids.size,
                               y.ctypes.data)
    if err is not None:
        raise ValueError(err.decode())
    return y


def register(session_options) -> bool:
    """Adds the ops to an onnxruntime.SessionOptions; False when there is no library."""
    path = library_path()
    if path is None:
        return False
    session_options.register_custom_ops_library(str(path))
    return True


def _require() -> ctypes.CDLL:
    lib = _lib()
    if lib is None:
        raise RuntimeError("the K-quant kernel library is not built (no C compiler when hexrag was installed)")
    return lib
