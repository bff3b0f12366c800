"""The K-quant kernel library (runtime/kquant) against an independent reference: gguf's own numpy
dequantization of the same blocks, times activations quantized the textbook way (per block of the
weight type, 256 or 32 values, int8 at 127 / max |x|, round half to even). Every vector path this
CPU has and the portable C path are run; the library is built by `pip install -e .`, so a checkout without it fails here rather
than passing on the fallback unnoticed.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from onnx import TensorProto, helper, numpy_helper

from runtime import kquant
from tests.conftest import need_kquant

TYPES = {kquant.Q4_K: GGMLQuantizationType.Q4_K, kquant.Q5_K: GGMLQuantizationType.Q5_K,
         kquant.Q6_K: GGMLQuantizationType.Q6_K, kquant.Q4_1: GGMLQuantizationType.Q4_1,
         kquant.Q8_0: GGMLQuantizationType.Q8_0}


def random_blocks(ggml_type: int, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n rows of k/block blocks with random codes and scales, and block scales of a real model's size."""
    nb = k // kquant.BLOCK_VALUES[ggml_type]
    half = lambda lo, hi: rng.uniform(lo, hi, (n, nb)).astype(np.float16).view(np.uint8).reshape(n, nb, 2)
    d = half(1e-3, 2e-2)
    if ggml_type in (kquant.Q4_K, kquant.Q5_K):  # d, dmin, 12 bytes of 6-bit scales and mins, (Q5_K: 32 bytes
        # of fifth bits,) 128 bytes of 4-bit codes
        rest = rng.integers(0, 256, (n, nb, 140 if ggml_type == kquant.Q4_K else 172), dtype=np.uint8)
        blocks = np.concatenate([d, half(1e-3, 2e-2), rest], axis=-1)
    elif ggml_type == kquant.Q6_K:  # 128 + 64 bytes of 6-bit codes, 16 int8 scales, d
        rest = rng.integers(0, 256, (n, nb, 208), dtype=np.uint8)
        blocks = np.concatenate([rest, d], axis=-1)
    elif ggml_type == kquant.Q4_1:  # d, a min of either sign, 16 bytes of 4-bit codes
        blocks = np.concatenate([d, half(-0.1, 0.1), rng.integers(0, 256, (n, nb, 16), dtype=np.uint8)], axis=-1)
    else:  # Q8_0: d, 32 int8 codes within ±127 as the GGUF writes them
        codes = rng.integers(-127, 128, (n, nb, 32), dtype=np.int8).view(np.uint8)
        blocks = np.concatenate([d, codes], axis=-1)
    return np.ascontiguousarray(blocks.reshape(n, -1))


def reference(blocks: np.ndarray, ggml_type: int, n: int, k: int, x: np.ndarray) -> np.ndarray:
    w = dequantize(blocks, TYPES[ggml_type]).reshape(n, k).astype(np.float64)
    b = x.reshape(x.shape[0], -1, kquant.BLOCK_VALUES[ggml_type]).astype(np.float32)
    amax = np.abs(b).max(-1, keepdims=True)
    iscale = np.float32(127) / np.where(amax > 0, amax, 1).astype(np.float32)
    xq = (np.rint(b * iscale) / iscale * (amax > 0)).reshape(x.shape)
    return xq.astype(np.float64) @ w.T


@pytest.fixture(autouse=True)
def _library():
    need_kquant()


@pytest.fixture(params=kquant.PATHS)
def path(request):
    if request.param not in kquant.paths_here():
        pytest.skip(f"this CPU has no {request.param}")
    best = kquant.kernel_path()
    assert kquant.force_path(request.param) == request.param
    yield request.param
    kquant.force_path(best)


@pytest.mark.parametrize("ggml_type", list(TYPES))
# 1-7 tokens: row by row, 1-4 sharing a block; from 8 on: the tiled product, 150 tokens of K=10240 in
# several cache-sized tiles; an odd N leaves one weight row without a partner
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 45, 150])
def test_matmul_equals_the_dequantized_product(path, ggml_type, m):
    rng = np.random.default_rng(ggml_type * 100 + m)
    n, k = 25, 256 * 40
    blocks = random_blocks(ggml_type, n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
    x[0, :256] = 0  # all-zero blocks of activations
    y = kquant.matmul(blocks, ggml_type, n, k, x, alpha=0.5)
    ref = 0.5 * reference(blocks, ggml_type, n, k, x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("ggml_type", [kquant.Q4_1, kquant.Q8_0])
@pytest.mark.parametrize("k", [576, 608])  # SmolLM2's hidden width: 18 blocks of 32; 19, an odd last one
def test_blocks_of_32_take_a_width_no_multiple_of_256(path, ggml_type, k):
    rng = np.random.default_rng(ggml_type)
    n = 37
    blocks = random_blocks(ggml_type, n, k, rng)
    for m in (1, 5, 9):
        x = rng.standard_normal((m, k)).astype(np.float32)
        ref = reference(blocks, ggml_type, n, k, x)
        np.testing.assert_allclose(kquant.matmul(blocks, ggml_type, n, k, x), ref, rtol=1e-4,
                                   atol=1e-4 * np.abs(ref).max())


def test_every_path_is_exactly_the_integer_dot_product_up_to_float_order():
    rng = np.random.default_rng(7)
    n, k = 64, 1536
    for ggml_type in TYPES:
        blocks = random_blocks(ggml_type, n, k, rng)
        x = rng.standard_normal((5, k)).astype(np.float32)
        best = kquant.kernel_path()
        outs = {}
        for p in kquant.paths_here():
            kquant.force_path(p)
            outs[p] = kquant.matmul(blocks, ggml_type, n, k, x)
        kquant.force_path(best)
        for p, y in outs.items():
            np.testing.assert_allclose(y, outs["scalar"], rtol=2e-6, atol=2e-6 * np.abs(y).max(), err_msg=p)


def test_bad_shapes_are_refused():
    rng = np.random.default_rng(1)
    blocks = random_blocks(kquant.Q4_K, 4, 512, rng)
    with pytest.raises(ValueError, match="N rows"):
        kquant.matmul(blocks[:, :-1], kquant.Q4_K, 4, 512, np.zeros((1, 512), np.float32))
    with pytest.raises(ValueError, match="multiple of"):
        kquant.matmul(blocks, kquant.Q4_K, 4, 500, np.zeros((1, 500), np.float32))
    with pytest.raises(ValueError, match="multiple of"):  # 576: blocks of 32 only
        kquant.matmul(random_blocks(kquant.Q4_1, 4, 576, rng), kquant.Q4_K, 4, 576, np.zeros((1, 576), np.float32))
    with pytest.raises(ValueError, match="unsupported"):
        kquant.matmul(blocks, 2, 4, 512, np.zeros((1, 512), np.float32))


@pytest.mark.parametrize("ggml_type", list(TYPES))
def test_gather_gives_the_dequantized_rows(ggml_type):
    rng = np.random.default_rng(ggml_type)
    n, k = 50, 512
    blocks = random_blocks(ggml_type, n, k, rng)
    ids = np.array([3, 0, 49, 3], np.int32)
    expected = dequantize(blocks, TYPES[ggml_type]).reshape(n, k)[ids]
    np.testing.assert_allclose(kquant.gather(blocks, ggml_type, n, k, ids), expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="outside the table"):
        kquant.gather(blocks, ggml_type, n, k, np.array([50], np.int32))


def _op_model(blocks: np.ndarray, ggml_type: int, n: int, k: int, alpha: float) -> bytes:
    node = helper.make_node(kquant.OP, ["x", "w"], ["y"], domain=kquant.DOMAIN, ggml_type=ggml_type, N=n, K=k,
                            alpha=alpha)
    graph = helper.make_graph([node], "kq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", n])],
                              [numpy_helper.from_array(blocks, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(kquant.DOMAIN, 1)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize("threads", [1, 2])
def test_the_onnx_runtime_op_computes_the_product_on_the_session_threads(threads):
    rng = np.random.default_rng(3)
    n, k = 1000, 768  # rows that do not divide into the op's tasks evenly
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    assert kquant.register(so)
    for ggml_type in TYPES:
        blocks = random_blocks(ggml_type, n, k, rng)
        session = ort.InferenceSession(_op_model(blocks, ggml_type, n, k, 0.125), so,
                                       providers=["CPUExecutionProvider"])
        x = rng.standard_normal((2, 3, k)).astype(np.float32)
        y = session.run(None, {"x": x})[0]
        assert y.shape == (2, 3, n)
        ref = 0.125 * reference(blocks, ggml_type, n, k, x.reshape(-1, k)).reshape(2, 3, n)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_the_op_refuses_blocks_that_do_not_match_its_shape():
    rng = np.random.default_rng(4)
    blocks = random_blocks(kquant.Q6_K, 8, 512, rng)
    so = ort.SessionOptions()
    kquant.register(so)
    session = ort.InferenceSession(_op_model(blocks[:7], kquant.Q6_K, 8, 512, 1.0), so,
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="N rows of K values"):
        session.run(None, {"x": np.zeros((1, 1, 512), np.float32)})
