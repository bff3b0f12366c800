"""The one compiled part of hexrag: the K-quant kernel library (runtime/kquant/kquant.c).

`optional=True`: a machine without a C compiler installs hexrag anyway (pip's log says the
extension failed) and its CPU builds use ONNX Runtime's own MatMulNBits kernels. No -march flag:
the library runs on any CPU of its architecture and picks its vector path when it loads.
"""

import sys

from setuptools import Extension, setup

unix = sys.platform != "win32"
setup(ext_modules=[Extension(
    "runtime.kquant._kquant",
    sources=["runtime/kquant/kquant.c"],
    depends=["runtime/kquant/kquant_x86.inc", "runtime/kquant/kquant_avx512.inc", "runtime/kquant/kquant_neon.inc",
             "runtime/kquant/ort_abi.h"],
    extra_compile_args=["-O3", "-std=c11", "-fvisibility=hidden"] if unix else ["/O2"],
    libraries=["m"] if unix else [],
    optional=True,
)])
