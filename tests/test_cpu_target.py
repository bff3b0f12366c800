"""The CPU target (`hexrag build llm --quant int4|int8`): GGUF blocks mapped bit-exactly onto
MatMulNBits, re-quantization for the rest, and the built graphs against the numpy reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize as gguf_quantize

from app.quickstart import _ready
from build_scripts.build import build_llm
from build_scripts.errors import BuildError
from build_scripts.plan import BuildPlan, LLMShape, build_model, parse_quant
from build_scripts.graph import blocks
from build_scripts.quantize.source_grid import grid_of
from models.manifest import load_manifest
from runtime.decoder import Decoder
from runtime.errors import RuntimeModelError
from runtime import kquant
from runtime.profile import profile_decode
from build_scripts import tiny_models as tm
from tests.conftest import need_kquant
from tests.reference import RefDecoder
from tests.test_decoder_graphs import cosine, run_greedy


def _raw_kquant(qtype: T, rows: int, rng) -> np.ndarray:
    """Random K-quant rows (2 super-blocks of 256 each) with sane float16 scales."""
    layout = blocks._LAYOUTS[qtype.name]
    b = np.frombuffer(rng.integers(0, 256, rows * 2 * layout.itemsize, dtype=np.uint8).tobytes(), layout).copy()
    b["d"] = rng.uniform(0.001, 0.01, b.shape).astype(np.float16)
    if "dmin" in layout.names:
        b["dmin"] = rng.uniform(0.001, 0.01, b.shape).astype(np.float16)
    return b.view(np.uint8).reshape(rows, -1)


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K])
def test_gguf_blocks_map_exactly(qtype):
    rng = np.random.default_rng(0)
    if qtype in (T.Q4_K, T.Q6_K):
        raw = _raw_kquant(qtype, 6, rng)
    else:
        raw = gguf_quantize(rng.standard_normal((6, 96)).astype(np.float32), qtype)
    bw = blocks.from_gguf(qtype.name, raw)
    expected = dequantize(raw, qtype).reshape(raw.shape[0], -1)
    np.testing.assert_allclose(bw.dequantize(), expected, rtol=1e-6, atol=1e-7)
    assert bw.origin == f"gguf {qtype.name} (exact)" and bw.bits == (8 if qtype in (T.Q8_0, T.Q6_K) else 4)
    # a folded constant (attention's 1/sqrt(d)) scales the whole weight, mins included
    np.testing.assert_allclose(bw.scaled(0.25).dequantize(), expected * 0.25, rtol=1e-6, atol=1e-7)
    # the same blocks as w8a16's signed int8 grid [K, N] (+ the min term where the type has one)
    grid = grid_of(bw)
    assert grid.codes.dtype == np.int8 and (grid.mins is None) == (qtype in (T.Q4_0, T.Q8_0, T.Q6_K))
    np.testing.assert_allclose(grid.dequantize(), expected.T, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bits", [4, 8])
def test_requantized_blocks_are_round_to_nearest(bits):
    w = np.random.default_rng(1).standard_normal((8, 80)).astype(np.float32)  # K pads to 96
    bw = blocks.quantize(w, bits, origin="F32")
    err = np.abs(bw.dequantize() - w).reshape(8, -1)
    per_block = np.repeat(bw.scales, 32, axis=1)[:, :80]
    assert (err <= per_block / 2 + 1e-6).all()  # never off by more than half a step
    assert bw.codes.shape == (8, 3, 32 * bits // 8) and (bw.zero_points is None) == (bits == 8)


@pytest.fixture(scope="module")
def q4_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("q4_sources")
    # SmolLM2's packaging: linear layers Q4_1, the (tied) embedding Q8_0; and a plain Q4_0 file
    tm.write_tiny_gguf(root / "q41.gguf", seed=11, qtype="Q4_1", embed_qtype="Q8_0")
    tm.write_tiny_gguf(root / "q40.gguf", seed=12, tied=False, qtype="Q4_0")
    return root


# Q4_1 and Q8_0 on MatMulNBits: the build without hexrag's kernels (they read those blocks themselves)
@pytest.mark.parametrize("name,quant,exact", [
    ("q41", "int4-matmulnbits", {"gguf Q4_1 (exact)": 14, "gguf Q8_0 (exact)": 1}),
    ("q40", "int4", {"gguf Q4_0 (exact)": 15})])
def test_int4_build_keeps_the_gguf_weights_and_matches_reference(q4_sources, tmp_path, name, quant, exact):
    src = q4_sources / f"{name}.gguf"
    out = tmp_path / name
    build_llm(src, out, context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant=quant)
    m = load_manifest(out)
    assert m.quantization.recipe == quant and m.quantization.blocks.weights == exact
    graph = onnx.load(str(out / "step.onnx"), load_external_data=False)
    ops = [n.op_type for n in graph.graph.node]
    # every linear layer and the LM head, q/k/v and gate/up each stacked into one weight; packed
    # q|k|v goes into the attention kernel as it is, only gate/up is split
    assert ops.count("MatMulNBits") == 4 * tm.N_LAYER + 1 and ops.count("Split") == tm.N_LAYER
    assert not any(t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2 and min(t.dims) >= tm.HIDDEN
                   for t in graph.graph.initializer if not t.name.endswith(("mins_t", "scales")))
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, 290, size=21)]
    tokens, logits = run_greedy(out, prompt, 8)
    expected = RefDecoder.from_gguf(src).logits(tokens)
    # the weights are the file's own; what differs is MatMulNBits' int8 activations (accuracy level 4)
    for step, got in enumerate(logits):
        c = cosine(got, expected[len(prompt) - 1 + step])
        assert c >= 0.995, f"step {step}: cosine {c:.5f}"


@pytest.fixture(scope="module")
def q4_k_m_source(tmp_path_factory):
    """llama.cpp's Q4_K_M mix (Qwen2.5's default packaging) on a decoder wide enough for K-quant blocks."""
    path = tmp_path_factory.mktemp("q4km") / "q4km.gguf"
    tm.write_tiny_gguf(path, arch="qwen2", seed=13, tied=False, qtype="Q4_K_M", hidden=256, ffn=512)
    return path


def _as_close_as_matmulnbits(kernels: Path, nbits: Path, source: Path) -> None:
    """Greedy logits of the build on hexrag's kernels near the file's own weights (numpy reference), and
    no further from them than the MatMulNBits build's on the same tokens."""
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, 290, size=21)]
    tokens, logits = run_greedy(kernels, prompt, 8)
    expected = RefDecoder.from_gguf(source).logits(tokens)
    _, other = run_greedy(nbits, tokens[:len(prompt)], 8)
    for step, got in enumerate(logits):
        ref = expected[len(prompt) - 1 + step]
        assert cosine(got, ref) >= 0.995, f"step {step}: cosine {cosine(got, ref):.5f}"
        assert cosine(got, ref) >= cosine(other[step], ref) - 0.002


def test_int4_reads_k_quant_blocks_with_hexrags_kernels(q4_k_m_source, tmp_path, monkeypatch):
    """`--quant int4` with the kernel library built: every K-quant layer one KQuantMatMul over the
    file's own bytes (no float scales, no min-term nodes), logits as close to the file's weights as
    the MatMulNBits build's."""
    need_kquant()
    out = tmp_path / "kq"
    build_llm(q4_k_m_source, out, context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant="int4")
    q = load_manifest(out).quantization
    assert q.format == "KQuantMatMul" and q.cpu_blocks and q.blocks.kquant_kernels
    assert q.blocks.weights == {"gguf Q4_K (exact, K-quant kernels)": 5 * tm.N_LAYER,
                                "gguf Q6_K (exact, K-quant kernels)": 2 * tm.N_LAYER + 1}
    graph = onnx.load(str(out / "step.onnx"), load_external_data=False)
    ops = [n.op_type for n in graph.graph.node]
    # q, k (Q4_K) and v (Q6_K) one op each (one type per op), gate/up stacked, o, down, the LM head
    assert ops.count("KQuantMatMul") == 6 * tm.N_LAYER + 1 and "MatMulNBits" not in ops and "ReduceSum" not in ops
    assert ops.count("KQuantGather") == 1 and "Cast" not in ops  # the Q4_K token embedding, read by row
    raw = {t.name: t for t in graph.graph.initializer if t.name.endswith(".kq")}
    table = int(np.prod(raw.pop("embed.kq").dims))
    assert q.blocks.linear_bytes == sum(int(np.prod(t.dims)) for t in raw.values())  # the file's bytes, nothing else
    assert table == tm.tiny_vocab_size() * 144  # one 256-value block a row, no float16 copy
    build_llm(q4_k_m_source, tmp_path / "i4", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False,
              quant="int4-matmulnbits")
    nbits = load_manifest(tmp_path / "i4").quantization
    assert nbits.format == "MatMulNBits" and nbits.blocks.weights == {"gguf Q4_K (exact)": 5 * tm.N_LAYER,
                                                                      "gguf Q6_K (exact)": 2 * tm.N_LAYER + 1}
    _as_close_as_matmulnbits(out, tmp_path / "i4", q4_k_m_source)
    # a machine where the library did not build says so instead of failing inside ONNX Runtime, and
    # builds MatMulNBits graphs
    monkeypatch.setattr(kquant, "library_path", lambda: None)
    with pytest.raises(RuntimeModelError, match="K-quant kernels, which were not built"):
        Decoder(out)
    build_llm(q4_k_m_source, tmp_path / "no-lib", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False,
              quant="int4")
    fallback = load_manifest(tmp_path / "no-lib").quantization
    assert fallback.format == "MatMulNBits" and not fallback.blocks.kquant_kernels
    # nor a CPU where only the portable C path runs: ONNX Runtime's SIMD kernels are faster there
    monkeypatch.undo()
    monkeypatch.setattr(kquant, "kernel_path", lambda: "scalar")
    build_llm(q4_k_m_source, tmp_path / "scalar", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False,
              quant="int4")
    assert load_manifest(tmp_path / "scalar").quantization.format == "MatMulNBits"
    monkeypatch.undo()  # the kernels are here again: quickstart rebuilds what was built without them
    assert not _ready(tmp_path / "no-lib", "int4") and _ready(out, "int4")


def test_int4_reads_q5_k_blocks_with_hexrags_kernels(tmp_path):
    """llama.cpp's Q5_K_M mix (Q5_K layers and token embedding, Q6_K for v, down and the LM head): every
    layer one KQuantMatMul over the file's own bytes, the embedding read by row from its Q5_K blocks;
    logits as close to the file's weights as the MatMulNBits build's (which re-quantizes Q5_K to 8 bits)."""
    need_kquant()
    source = tmp_path / "q5km.gguf"
    tm.write_tiny_gguf(source, arch="qwen2", seed=17, tied=False, qtype="Q5_K_M", hidden=256, ffn=512)
    out = tmp_path / "kq"
    build_llm(source, out, context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant="int4")
    q = load_manifest(out).quantization
    assert q.format == "KQuantMatMul" and q.blocks.weights == {"gguf Q5_K (exact, K-quant kernels)": 5 * tm.N_LAYER,
                                                               "gguf Q6_K (exact, K-quant kernels)": 2 * tm.N_LAYER + 1}
    graph = onnx.load(str(out / "step.onnx"), load_external_data=False)
    ops = [n.op_type for n in graph.graph.node]
    assert ops.count("KQuantMatMul") == 6 * tm.N_LAYER + 1 and "MatMulNBits" not in ops
    assert ops.count("KQuantGather") == 1 and "Cast" not in ops
    table = next(t for t in graph.graph.initializer if t.name == "embed.kq")
    assert int(np.prod(table.dims)) == tm.tiny_vocab_size() * 176  # one 256-value Q5_K block a row
    build_llm(source, tmp_path / "i4", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False,
              quant="int4-matmulnbits")
    assert "MatMulNBits" == load_manifest(tmp_path / "i4").quantization.format
    _as_close_as_matmulnbits(out, tmp_path / "i4", source)


def test_int4_reads_q4_1_and_q8_0_blocks_with_hexrags_kernels(q4_sources, tmp_path, monkeypatch):
    """SmolLM2's packaging (Q4_1 layers, a tied Q8_0 embedding) with the kernel library built: every
    layer and the LM head one KQuantMatMul over the file's bytes, the embedding read by row from the
    same Q8_0 table, no min-term nodes; logits as close to the file's weights as the MatMulNBits build's."""
    need_kquant()
    src = q4_sources / "q41.gguf"
    out = tmp_path / "kq"
    build_llm(src, out, context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant="int4")
    q = load_manifest(out).quantization
    assert q.format == "KQuantMatMul" and q.blocks.weights == {"gguf Q4_1 (exact, K-quant kernels)": 14,
                                                               "gguf Q8_0 (exact, K-quant kernels)": 1}
    graph = onnx.load(str(out / "step.onnx"), load_external_data=False)
    ops = [n.op_type for n in graph.graph.node]
    assert ops.count("KQuantMatMul") == 4 * tm.N_LAYER + 1 and "MatMulNBits" not in ops and "ReduceSum" not in ops
    assert ops.count("KQuantGather") == 1 and "Cast" not in ops
    # the LM head and the embedding share one table: the file's Q8_0 rows, 34 bytes per 32 values
    tables = [t for t in graph.graph.initializer if t.name == "embed.kq"]
    assert len(tables) == 1 and int(np.prod(tables[0].dims)) == tm.tiny_vocab_size() * tm.HIDDEN // 32 * 34
    build_llm(src, tmp_path / "nb", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False,
              quant="int4-matmulnbits")
    _as_close_as_matmulnbits(out, tmp_path / "nb", src)
    # an int4 build from before the kernels read these blocks is rebuilt by quickstart, not reused
    for qtype in ("Q4_1", "Q8_0"):
        monkeypatch.delitem(blocks.KQUANT_TYPES, qtype)
    build_llm(src, tmp_path / "old", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant="int4")
    monkeypatch.undo()
    assert load_manifest(tmp_path / "old").quantization.format == "MatMulNBits"
    assert not _ready(tmp_path / "old", "int4") and _ready(out, "int4")


def test_int4_requant_drops_the_min_term(q4_sources, tmp_path):
    """`--quant int4-requant`: Q4_1 re-quantized to integer zero points (no min term), the Q8_0 LM
    head to 4 bits too; fewer bytes and nodes than int4, and logits still near the file's own."""
    src = q4_sources / "q41.gguf"
    plan = BuildPlan(weights=str(src), out=tmp_path / "rq", shape=LLMShape(context=tm.MAX_POS // 2, prefill=(16, 4)),
                     quant=parse_quant("int4-requant"), progress=False)
    m = build_model(plan)
    assert m.quantization.recipe == "int4-requant"
    assert m.quantization.blocks.weights == {"re-quantized from Q4_1 (4-bit asymmetric, round-to-nearest)": 14,
                                      "re-quantized from Q8_0 (4-bit asymmetric, round-to-nearest)": 1}
    build_llm(src, tmp_path / "i4", context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant="int4")
    exact = load_manifest(tmp_path / "i4").quantization
    assert m.quantization.blocks.linear_bytes < exact.blocks.linear_bytes
    ops = [n.op_type for n in onnx.load(str(tmp_path / "rq" / "step.onnx"), load_external_data=False).graph.node]
    assert "ReduceSum" not in ops and "MatMul" not in ops and ops.count("MatMulNBits") == 4 * tm.N_LAYER + 1
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, 290, size=21)]
    tokens, logits = run_greedy(tmp_path / "rq", prompt, 8)
    expected = RefDecoder.from_gguf(src).logits(tokens)
    worst = min(cosine(got, expected[len(prompt) - 1 + i]) for i, got in enumerate(logits))
    assert 0.95 <= worst < 0.999, worst  # a second rounding: close, but no longer the file's own weights


def test_int8_and_float_sources(tiny_sources, tmp_path):
    # an HF float source has no blocks to keep: int4 re-quantizes; int8 stays close to float
    # (random weights are the worst case for 4 bits: no outliers to spare, every block full range)
    for quant, floor in (("int8", 0.999), ("int4", 0.95)):
        out = tmp_path / quant
        build_llm(tiny_sources["qwen2"], out, context=tm.MAX_POS // 2, prefill=(16, 4), progress=False, quant=quant)
        origins = load_manifest(out).quantization.blocks.weights
        assert all(o.startswith("re-quantized from float") for o in origins)
        prompt = [int(t) for t in np.random.default_rng(3).integers(3, 290, size=9)]
        tokens, logits = run_greedy(out, prompt, 4)
        expected = RefDecoder.from_hf(tiny_sources["qwen2"]).logits(tokens)
        worst = min(cosine(got, expected[len(prompt) - 1 + i]) for i, got in enumerate(logits))
        assert worst >= floor, (quant, worst)


def test_unknown_cpu_quantization_is_refused(tiny_sources, tmp_path):
    with pytest.raises(BuildError, match="unknown --quant 'int3'"):
        build_llm(tiny_sources["llama"], tmp_path / "x", context=32, prefill=(4,), progress=False, quant="int3")
    assert not (tmp_path / "x").exists()


def test_inplace_cache_to_the_last_slot(q4_sources, tmp_path):
    """CPU-target graphs write their rows into the cache themselves (GroupQueryAttention over
    the "inplace" contract): right-padded chunks, rewinds and steps up to the very last slot
    all keep the reference's logits."""
    out = tmp_path / "q40"
    build_llm(q4_sources / "q40.gguf", out, context=48, prefill=(16, 4), progress=False, quant="int4")
    m = load_manifest(out)
    decode = m.graph("decode")
    assert next(t for t in decode.inputs if t.name == "past_key_0").shape == [1, tm.N_KV_HEAD, 48, tm.HEAD_DIM]
    # one graph file with a symbolic S for every step size: one session, one copy of the packed weights
    assert {g.file for g in m.graphs} == {"step.onnx"} and [g.seq for g in m.graphs] == [16, 4, 1]
    graph = onnx.load(str(out / "step.onnx"), load_external_data=False).graph
    assert graph.input[0].type.tensor_type.shape.dim[1].dim_param == "S"
    ops = [n.op_type for n in graph.node]
    assert ops.count("GroupQueryAttention") == tm.N_LAYER and "Softmax" not in ops
    dec = Decoder(out)
    assert len({id(s) for s in dec.sessions.values()}) == 1
    assert all(dec.io[16, 1].outputs[f"present_key_{i}"] is dec.cache.keys[i] is dec.io[1, 1].inputs[f"past_key_{i}"]
               for i in range(dec.n_layers))
    ref = RefDecoder.from_gguf(q4_sources / "q40.gguf")

    def check(logits: list[np.ndarray], tokens: list[int], positions):
        expected = ref.logits(tokens)
        worst = min(cosine(got, expected[p]) for got, p in zip(logits, positions, strict=True))
        assert worst >= 0.995, worst

    rng = np.random.default_rng(5)
    prompt = [int(t) for t in rng.integers(3, 290, size=21)]  # 16, then 5: exact lengths, never padded
    logits, tokens = [dec.feed(prompt)], list(prompt)
    session = dec.sessions[16]
    assert set(dec._bindings) == {(id(session), 16, 1), (id(session), 5, 1)}
    while len(tokens) < 40:
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(dec.feed([tokens[-1]]))
    check(logits, tokens, range(len(prompt) - 1, len(tokens)))
    # rewind over written rows, then 10 + 8 tokens: the last chunk fills the very last slots
    dec.rewind(30)
    tail = [int(t) for t in rng.integers(3, 290, size=18)]
    got = [dec.feed(tail[:10]), dec.feed(tail[10:])]
    assert dec.cache.length == 48 == len(dec.tokens)
    check(got, tokens[:30] + tail, [39, 47])
    # a build by an older hexrag (here: its decode graph without last_index) is refused with the fix,
    # and quickstart rebuilds it instead of reusing it
    stale = tmp_path / "stale"
    shutil.copytree(out, stale)
    m = load_manifest(stale)
    m.graph("decode").inputs = [t for t in decode.inputs if t.name != "last_index"]
    m.save(stale)
    with pytest.raises(RuntimeModelError, match="graph decode's inputs differ .* rebuild it"):
        Decoder(stale)
    assert not _ready(stale, "int4") and _ready(out, "int4")


def test_decode_profile_counts_every_node_of_a_step(q4_sources, tmp_path):
    out = tmp_path / "q41"
    build_llm(q4_sources / "q41.gguf", out, context=48, prefill=(16, 4), progress=False, quant="int4")
    s = profile_decode(str(out), prompt=8, steps=6, threads=1)
    ops = {r["op"]: r for r in s["ops"]}
    assert s["runs"] == 3 and s["run_ms"] > 0
    # per decode step: every linear (q|k|v and gate|up stacked) plus the LM head, one attention per layer
    linear = load_manifest(out).quantization.format  # KQuantMatMul where hexrag's kernels run, else MatMulNBits
    assert ops[linear]["nodes"] == 4 * tm.N_LAYER + 1
    assert ops["GroupQueryAttention"]["nodes"] == tm.N_LAYER
    assert ops["outside nodes"]["ms"] >= 0 and sum(r["share"] for r in s["ops"]) == pytest.approx(1.0)
    with pytest.raises(SystemExit, match="exceed the model's context 48"):
        profile_decode(str(out), prompt=40, steps=16)


def test_ab_runs_every_build_and_spin_in_turn(q4_sources, tmp_path, capsys):
    """`python -m runtime.ab`: each (build, spin) pair loaded once, measured in every round."""
    from runtime import ab

    out = tmp_path / "q40"
    build_llm(q4_sources / "q40.gguf", out, context=48, prefill=(16, 4), progress=False, quant="int4")
    speeds = ab.run_ab([str(out)], [0, 20], prompt=8, gen=4, rounds=3, threads=1)
    assert list(speeds) == [(str(out), 0), (str(out), 20)]
    assert all(len(v) == 3 and min(v) > 0 for v in speeds.values())
    ab.main(["--model", str(out), "--spin-us", "0,20", "--prompt", "8", "--gen", "4", "--rounds", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("decode tok/s, 8-token prompt, 4 tokens, 2 interleaved rounds")
    assert [ln.split(":")[0] for ln in lines[1:]] == [f"{out}  spin 0 us", f"{out}  spin 20 us"]
    # bad input: one line each, no traceback
    for args, why in ((["--prompt", "40", "--gen", "9"], "exceed"), (["--spin-us", "0,-5"], "from 0 to 100000")):
        with pytest.raises(SystemExit, match=why):
            ab.main(["--model", str(out), *args])
    with pytest.raises(SystemExit, match="not a hexrag model directory"):
        ab.main(["--model", str(tmp_path / "nothing")])
