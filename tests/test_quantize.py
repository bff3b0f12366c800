"""PTQ quantization (build_scripts/quantize) on real graphs: tiny random-weight models calibrated
with the knowledge-base sample text, run on the CPU EP through the runtime with a uint16 KV cache,
compiled for HTP and run on the x86 HTP simulator.

Thresholds. The tiny models have random weights: their next-token distributions are nearly flat
(held-out perplexity ~2500 over a 298-token vocabulary), so the top-2 logits are often within
quantization noise of each other and greedy agreement is a noisy statistic there; logits cosine
is the meaningful one. Measured w8a16 on the tiny llama: mean logits cosine 0.9991 (min 0.94 at
a single step), teacher-forced greedy agreement 0.98. The tests ask for mean cosine >= 0.995 and
agreement >= 0.9: an order of magnitude of headroom on (1 - cosine), while a broken recipe
(e.g. a clipped activation, measured 0.955 / 0.83 before calibration covered the first context
positions) fails them. The simulator runs the same quantized graphs as the CPU EP, so it must
match them much more closely (>= 0.999, same greedy tokens). Real-weight accuracy (SmolLM2) is
measured by `python -m build_scripts.quantize.evaluate`, not here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from build_scripts.errors import BuildError
from build_scripts.quantize import RECIPES, quantize_model_dir, resolve_recipe
from build_scripts.quantize import calibration as cal
from build_scripts.quantize.gptq import HessianStore
from build_scripts.quantize.pipeline import prepare_graphs
from build_scripts.quantize.qdq import pack_int4, read_initializers
from models.manifest import Manifest, ManifestError, load_manifest
from runtime.decoder import Decoder
from runtime.embedder import Embedder
from runtime.errors import RuntimeModelError
from runtime.llm import LLM
from runtime.options import RuntimeOptions

SAMPLES = 24  # calibration samples: plenty for tiny models, keeps each quantization to seconds
TARGETS = ["sm8650", "sm8750"]  # v75 and v79


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def w8(tiny_builds, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("quant") / "llama_w8a16"
    result = quantize_model_dir(tiny_builds["llama"], "w8a16", samples=SAMPLES, out=out, progress=False)
    return {"dir": out, "result": result}


@pytest.fixture(scope="module")
def held_out(tiny_builds):
    """Held-out sample text (never calibrated on), tokenized for the tiny llama."""
    llm = LLM(tiny_builds["llama"])
    _, held, _ = cal.calibration_texts(None, SAMPLES)
    return cal.tokenize_samples(llm, held[:6], llm.context, 24, prompt_max=30)


def _graph(d, name) -> onnx.ModelProto:
    return onnx.load(str(d / f"{name}.onnx"), load_external_data=False)


def _quantized_residuals(path) -> list[str]:
    """Residual adds whose output goes through a QuantizeLinear (a 16-bit residual stream)."""
    g = onnx.load(str(path), load_external_data=False).graph
    quantized = {n.input[0] for n in g.node if n.op_type == "QuantizeLinear"}
    return [n.name for n in g.node if n.name.endswith("/residual") and n.output[0] in quantized]


def _teacher_forced(a: Decoder, b: Decoder, seqs):
    cos, agree = [], []
    for s in seqs:
        a.reset()
        b.reset()
        la, lb = a.feed(s.prompt), b.feed(s.prompt)
        for tok in s.continuation:
            cos.append(cosine(la, lb))
            agree.append(int(np.argmax(la)) == int(np.argmax(lb)))
            la, lb = a.feed([tok]), b.feed([tok])
    return float(np.mean(cos)), float(np.mean(agree))


# ------------------------------------------------------------------------------------------------
# w8a16 LLM on the CPU
# ------------------------------------------------------------------------------------------------

def test_w8a16_manifest_graphs_and_shared_kv_encoding(w8, tiny_builds):
    d = w8["dir"]
    m = load_manifest(d)  # every file hashes as recorded
    q = m.quantization.model_dump(exclude_none=True)
    assert q["recipe"] == "w8a16" and q["ptq"]["recipe"]["activations"] == "uint16"
    assert (tiny_builds["llama"] / "manifest.json").is_file()  # out=...: the float build is untouched
    assert load_manifest(tiny_builds["llama"]).quantization.recipe == "none"
    # KV cache I/O is uint16 in every graph; everything else at the boundary stays as it was
    for g in m.graphs:
        for t in (*g.inputs, *g.outputs):
            kv = t.name.startswith(("past_", "new_"))
            assert t.dtype == ("uint16" if kv else {"input_ids": "int32"}.get(t.name, "float32")), (g.name, t)
    # ONE encoding per KV tensor, identical for prefill_16, prefill_4 and decode
    kv = q["kv_cache"]
    assert kv["dtype"] == "uint16" and sorted(kv["graphs"]) == sorted(g.name for g in m.graphs)
    assert len(kv["tensors"]) == 2 * m.architecture.n_layers
    for graph, io in q["io"].items():
        for name, p in io.items():
            if name.startswith(("past_", "new_")):
                want = kv["tensors"][name.split("_", 1)[1]]
                assert (p["dtype"], p["scale"], p["zero_point"]) == ("uint16", want["scale"], want["zero_point"])
    for key, t in kv["tensors"].items():  # the pinned range is what the scale encodes
        assert t["rmin"] < 0 < t["rmax"]
        assert t["scale"] == pytest.approx((t["rmax"] - t["rmin"]) / 65535, rel=1e-3), key
    # the float-boundary inputs say how the graph quantizes them inside
    assert q["io"]["decode"]["attention_mask"]["quantized_inside"]["dtype"] == "uint16"
    # calibration used real text through every graph, held-out metrics were recorded
    c = q["ptq"]["calibration"]
    assert {"aurora_faq.jsonl", "aurora_manual.md", "generic-chat"} <= set(c["sources"])
    assert all(c["runs"][g.name] > 0 for g in m.graphs)
    metrics = m.metrics.quantization  # one record of the metrics, typed
    assert metrics.logits_cosine >= 0.995 and metrics.greedy_agreement >= 0.9
    assert abs(metrics.perplexity_change) < 0.05 and "metrics" not in q
    assert metrics.model_dump(exclude_none=True) == w8["result"]["metrics"]
    assert q["ptq"]["weights"]["tensors"]["layers.1.up.weight_t"]["rounding"] == "gptq"
    assert c["gptq"]["weights"] == 14 and not c["gptq"]["skipped"]
    assert q["ptq"]["report"] == ["quantization.md", "quantization_ranges.json", "quantization_ranges.png"]
    report = (d / "quantization.md").read_text()
    assert "Activation ranges per layer" in report and "| 0 |" in report and "| 1 |" in report
    ranges = json.loads((d / "quantization_ranges.json").read_text())
    assert set(ranges) == {g.name for g in m.graphs}
    png = d / "quantization_ranges.png"  # the per-layer plot (matplotlib comes with the test extra)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # the residual stream flows in float from layer to layer (FLOAT_RESIDUAL): no QuantizeLinear on it
    for g in m.graphs:
        assert _quantized_residuals(d / g.file) == [], g.name
    # one shared weights file, far smaller than the float one
    assert m.weights_file == "weights.data" and not any(p.name.endswith(".prep.data") for p in d.iterdir())
    assert (d / "weights.data").stat().st_size < 0.5 * (tiny_builds["llama"] / "weights.data").stat().st_size


def test_w8a16_weight_encodings(w8):
    g = _graph(w8["dir"], "decode")
    inits = {t.name: t for t in g.graph.initializer}
    dq = {n.input[0]: n for n in g.graph.node if n.op_type == "DequantizeLinear"}
    for name in ("layers.0.q.weight_t", "layers.1.down.weight_t"):
        node = dq[f"{name}_quantized"]
        assert inits[f"{name}_quantized"].data_type == TensorProto.INT8
        assert next(a.i for a in node.attribute if a.name == "axis") == 1  # per output channel
        assert len(inits[node.input[1]].dims) == 1 and inits[node.input[1]].dims[0] > 1
        assert not numpy_helper.to_array(inits[node.input[2]]).any()  # symmetric: zero points 0
    # the tied table: int16 per tensor for both the token Gather and the LM head, stored once
    for name in ("embed", "lm_head"):
        assert inits[f"{name}_quantized"].data_type == TensorProto.INT16
        assert len(inits[f"{name}_scale"].dims) == 0
    offsets = [{e.key: e.value for e in inits[f"{n}_quantized"].external_data}["offset"] for n in ("embed", "lm_head")]
    assert offsets[0] == offsets[1]
    # past_* feed their DequantizeLinear directly: no boundary QuantizeLinear left
    consumers = {x: n.op_type for n in g.graph.node for x in n.input}
    assert consumers["past_key_0"] == "DequantizeLinear" and consumers["past_value_1"] == "DequantizeLinear"
    assert not any(n.op_type == "QuantizeLinear" and n.input[0].startswith("past_") for n in g.graph.node)


def test_w8a16_runs_on_cpu_with_uint16_cache_and_agrees_with_float(w8, tiny_builds, held_out, tmp_path):
    f, q = Decoder(tiny_builds["llama"]), Decoder(w8["dir"])
    assert q.kv_dtype == np.uint16 and f.kv_dtype == np.float32
    assert all(k.dtype == np.uint16 for k in q.cache.keys + q.cache.values)
    zp = w8["result"]["kv_cache"]["tensors"]["key_0"]["zero_point"]
    assert (q.cache.keys[0] == zp).all()  # empty slots hold the encoding of 0.0
    mean_cos, agree = _teacher_forced(f, q, held_out)
    assert mean_cos >= 0.995 and agree >= 0.9, (mean_cos, agree)
    # new rows went into the cache as the graphs returned them, dequantizing to the float cache
    n = q.cache.length
    t = w8["result"]["kv_cache"]["tensors"]["value_1"]
    deq = (q.cache.values[1][:, :, :n].astype(np.float64) - t["zero_point"]) * t["scale"]
    assert cosine(deq, f.cache.values[1][:, :, :n]) > 0.99
    # the host never converts: a float row cannot go into the uint16 cache
    with pytest.raises(TypeError, match="uint16"):
        q.cache.write(0, np.zeros((1, 2, 16, 1), np.float32), np.zeros((1, 2, 1, 16), np.float32), 1)
    # generation through the LLM engine works unchanged
    llm = LLM(w8["dir"])
    assert llm.generate(llm.encode_chat([{"role": "user", "content": "hello"}]), max_new_tokens=4).run().token_ids
    # passage KV re-rotates float keys: a quantized cache is refused when it is set up, not mid-answer,
    # and answers then prefill their instructions instead of placing kept rows
    from app.answer.passage_kv import PassageKV, kept_rows

    with pytest.raises(RuntimeModelError, match="needs a float cache"):
        PassageKV(llm)
    with pytest.raises(RuntimeModelError, match="needs a float cache"):
        kept_rows(llm, tmp_path, passages=True)
    assert kept_rows(llm, tmp_path, passages=False) is None
    assert kept_rows(llm, tmp_path) is None  # the default: passage KV where the cache takes it, so none here


def test_runtime_refuses_a_graph_with_its_own_kv_encoding(w8, tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(w8["dir"], d)
    m = json.loads((d / "manifest.json").read_text())
    m["quantization"]["io"]["prefill_4"]["past_key_1"]["scale"] *= 2
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="prefill_4 encodes past_key_1 differently.*rebuild the model"):
        Decoder(d)
    del m["quantization"]["kv_cache"]
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="uint16 KV cache"):
        Decoder(d)
    with pytest.raises(ValueError, match="uint16 KV cache"):  # and a builder cannot write such a manifest
        Manifest.model_validate(m).save(d)


# ------------------------------------------------------------------------------------------------
# HTP: compile with zero CPU nodes, simulator vs quantized CPU
# ------------------------------------------------------------------------------------------------

def _htp():
    pytest.importorskip("onnxruntime_qnn")
    from build_scripts.compile import compile_model_dir, record_target
    from runtime import qnn

    return compile_model_dir, record_target, qnn


def _assert_same_greedy_run(cpu: Decoder, htp: Decoder, prompt: list[int], steps: int) -> None:
    """The prompt, then `steps` greedy tokens, through both decoders: the same token at every step
    and logits cosine >= 0.999 (both then hold the prompt and all `steps` tokens)."""
    lc, lh = cpu.feed(prompt), htp.feed(prompt)
    for step in range(steps):
        assert cosine(lc, lh) >= 0.999, (step, cosine(lc, lh))
        tok = int(np.argmax(lc))
        assert int(np.argmax(lh)) == tok
        lc, lh = cpu.feed([tok]), htp.feed([tok])


def test_w8a16_compiles_fully_for_two_targets_and_simulator_matches_cpu(w8, tmp_path, monkeypatch):
    compile_model_dir, record_target, qnn = _htp()
    d = tmp_path / "llama_w8a16"
    shutil.copytree(w8["dir"], d)
    entry = compile_model_dir(d, TARGETS, shared=False, fp16=False)
    record_target(d, entry)
    assert {b.target for b in entry.builds} == set(TARGETS)
    for build in entry.builds:
        for graph, placement in build.placement.items():
            assert placement["cpu"] == 0 and placement["htp"] > 100, (build.target, graph, placement)
    # every graph of the sm8650 build on the simulator against the same quantized graphs on the CPU:
    # a prompt longer than the 16-bucket, greedy decode, then a 3-token turn (the 4-bucket)
    cpu, htp = Decoder(d), Decoder(d, RuntimeOptions(backend="htp", target="sm8650"))
    assert htp.kv_dtype == np.uint16
    rng = np.random.default_rng(7)
    _assert_same_greedy_run(cpu, htp, [int(t) for t in rng.integers(3, 290, size=21)], steps=6)
    turn = [int(t) for t in rng.integers(3, 290, size=3)]
    assert cosine(cpu.feed(turn), htp.feed(turn)) >= 0.999
    # both hosts hold raw uint16 KV of the same encoding: the rows agree to a few levels
    n = cpu.cache.length
    t = load_manifest(d).quantization.kv_cache.tensors["key_0"]
    a, b = ((x[..., :n].astype(np.float64) - t.zero_point) * t.scale for x in (cpu.cache.keys[0], htp.cache.keys[0]))
    assert cosine(a, b) >= 0.999
    # the second target's binaries load on the simulator too
    from runtime.session import GraphSession

    v79 = qnn.select_build(load_manifest(d).target, "sm8750")
    sess = GraphSession(d / v79.graphs["decode"], RuntimeOptions(backend="htp"))
    assert sess.input_names and "past_key_0" in sess.input_names


def test_a_model_over_the_part_budget_compiles_in_parts_that_run_like_the_whole(w8, tmp_path, monkeypatch):
    from build_scripts.split import part_weight_bytes, plan_parts

    compile_model_dir, record_target, qnn = _htp()
    d = tmp_path / "llama_w8a16"
    shutil.copytree(w8["dir"], d)
    m = load_manifest(d)
    decode = _graph(d, "decode")
    whole = part_weight_bytes(decode, [(0, m.architecture.n_layers)])[0]
    budget = whole * 6 // 10  # two layers, embedding and head: two parts of about half each
    assert plan_parts(decode, budget) == [(0, 1), (1, 2)]
    assert max(part_weight_bytes(decode, [(0, 1), (1, 2)])) <= budget
    with pytest.raises(BuildError, match="raise the budget"):
        plan_parts(decode, whole // 10)

    entry = compile_model_dir(d, ["sm8650"], shared=False, fp16=False, part_budget=budget)
    record_target(d, entry)
    sim = entry.builds[0]
    assert sim.parts == 2 and sim.part_layers == [[0, 0], [1, 1]]
    for graph, files in sim.graphs.items():
        assert [Path(f).name for f in files] == [f"{graph}.part0_ctx.onnx", f"{graph}.part1_ctx.onnx"]
        assert sim.placement[graph]["cpu"] == 0
    assert not list(d.glob("*.part*.onnx"))  # the split graphs are compile intermediates
    # devices: one context binary per part holds that part of every graph
    shared = compile_model_dir(d, ["sm8650"], shared=True, fp16=False, part_budget=budget)
    record_target(d, shared)
    binaries = shared.builds[-1].binaries
    assert sorted(Path(b).name for b in binaries) == ["prefill_16.part0_ctx_qnn.bin", "prefill_16.part1_ctx_qnn.bin"]

    # the simulator runs the parts one after the other, as the CPU runs the whole quantized graphs
    cpu, htp = Decoder(d), Decoder(d, RuntimeOptions(backend="htp", target="sm8650"))
    assert len(htp.sessions[1].parts) == 2
    rng = np.random.default_rng(11)
    _assert_same_greedy_run(cpu, htp, [int(t) for t in rng.integers(3, 290, size=21)], steps=4)


def test_a_v68_build_quantizes_the_lm_head_to_8_bits_and_compiles_fully(tiny_builds, tmp_path):
    """SA8295P (the cockpit class, v68) has no 16-bit Gemm weights: for_targets gives its builds an
    int8 per-channel LM head; everything else (fp16 residual included) compiles as on v75.
    SM8350 (also v68) does not, and the error says which nodes."""
    from build_scripts.quantize import RECIPES, for_targets

    assert for_targets(RECIPES["w8a16"], [75, 79]) is RECIPES["w8a16"]
    recipe = for_targets(RECIPES["w8a16"], [68, 75])
    assert (recipe.name, recipe.lm_head, recipe.lm_head_per_channel) == ("w8a16+v68", "int8", True)
    assert not recipe.source_grid  # v68 takes int4 block weights but not int8 ones
    out = tmp_path / "llama_v68"
    quantize_model_dir(tiny_builds["llama"], recipe, samples=SAMPLES, out=out, progress=False, eval_samples=2)
    assert load_manifest(out).quantization.ptq.weights.tensors["lm_head"].type == "int8"
    compile_model_dir, _, _ = _htp()
    entry = compile_model_dir(out, ["sa8295p"], shared=False, fp16=False)
    assert all(p["cpu"] == 0 and p["htp"] > 100 for p in entry.builds[0].placement.values())
    # SM8350, the other v68 part, validates every node and then cannot create some of them (QNN
    # 2.51, docs/benchmarks.md): the error names them instead of QNN's bare MEM_ALLOC code
    with pytest.raises(BuildError) as info:
        compile_model_dir(out, ["sm8350"], shared=False, fp16=False)
    assert "could not create" in str(info.value) and "had passed validation for sm8350: /layers." in str(info.value)
    assert info.value.reports and all(r.uncreated for r in info.value.reports)


_QNN_NAMES = {TensorProto.FLOAT: "QNN_DATATYPE_FLOAT_32", TensorProto.INT32: "QNN_DATATYPE_INT_32",
              TensorProto.UINT16: "QNN_DATATYPE_UFIXED_POINT_16"}


def _utility_json(ctx_model: Path, kv: dict, path: Path) -> tuple[Path, str]:
    """What `qnn-context-binary-utility --json_file` writes for the binary behind an EPContext model
    (the SDK tool is not in the wheel; its schema is): returns (binary, QNN graph name)."""
    model = onnx.load(str(ctx_model))
    node = model.graph.node[0]
    attrs = {a.name: a for a in node.attribute}

    def tensor(v):
        q = {"definition": "QNN_DEFINITION_UNDEFINED"}
        if v.name.startswith(("past_", "new_")):
            enc = kv[v.name.split("_", 1)[1]]
            q = {"definition": "QNN_DEFINITION_DEFINED", "quantizationEncoding": "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET",
                 "scaleOffset": {"scale": enc["scale"], "offset": -enc["zero_point"]}}
        t = v.type.tensor_type
        return {"info": {"name": v.name, "dataType": _QNN_NAMES[t.elem_type],
                         "dimensions": [d.dim_value for d in t.shape.dim], "quantizeParams": q}}

    path.write_text(json.dumps({"info": {"buildId": attrs["ep_sdk_version"].s.decode(), "graphs": [{"info": {
        "graphName": node.name, "graphInputs": [tensor(v) for v in model.graph.input],
        "graphOutputs": [tensor(v) for v in model.graph.output]}}]}}))
    return ctx_model.parent / attrs["ep_cache_context"].s.decode(), node.name


def test_wrap_context_binaries_load_like_our_own_builds(w8, tmp_path, monkeypatch):
    """`hexrag build wrap-context`: real context binaries (compiled here) + their utility JSON ->
    a model directory the runtime runs on the simulator with identical logits; contract breaks
    are refused with the fix named."""
    from tests.test_cli_runtime import hexrag

    compile_model_dir, record_target, qnn = _htp()
    d = tmp_path / "llama_w8a16"
    shutil.copytree(w8["dir"], d)
    record_target(d, compile_model_dir(d, ["sm8650"], shared=False, fp16=False))
    m = load_manifest(d)
    kv = m.quantization.model_dump()["kv_cache"]["tensors"]
    args, names = [], {}
    for g, ctx in m.target.builds[0].graphs.items():
        binary, names[g] = _utility_json(d / ctx, kv, tmp_path / f"{g}.json")
        args += ["--binary", str(binary), "--json", str(tmp_path / f"{g}.json"), "--graph", f"{g}={names[g]}"]
    out = tmp_path / "wrapped"
    proc = hexrag("build", "wrap-context", "--model", str(d), "--target", "sm8650", "--out", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    wrapped = load_manifest(out)
    assert wrapped.target.builds[0].wrapped == names
    tensors = wrapped.quantization.model_dump(exclude_none=True)["kv_cache"]["tensors"]
    assert tensors == {k: {"scale": e["scale"], "zero_point": e["zero_point"]} for k, e in kv.items()}
    assert not list(out.glob("*.onnx")) and not (out / "weights.data").exists()  # binaries only
    sm8650 = RuntimeOptions(backend="htp", target="sm8650")
    ours, theirs = Decoder(d, sm8650), Decoder(out, sm8650)
    prompt = [5, 17, 42, 8, 99, 23, 7]
    np.testing.assert_array_equal(ours.feed(prompt), theirs.feed(prompt))
    np.testing.assert_array_equal(ours.feed([11]), theirs.feed([11]))
    with pytest.raises(RuntimeModelError, match="run it with --backend htp"):
        Decoder(out)

    from build_scripts.wrap_context import wrap_context

    pairs = [(Path(a), Path(b)) for a, b in zip(args[1::6], args[3::6])]
    with pytest.raises(BuildError, match="map it with --graph prefill_16="):
        wrap_context(d, pairs, "sm8650", tmp_path / "x")
    decode_json = tmp_path / "decode.json"
    good = decode_json.read_text()
    for edit, message in ((lambda t: t["info"]["name"] == "rope_cos" and t["info"].update(
                               dataType="QNN_DATATYPE_UFIXED_POINT_16"), "--preserve_io datatype rope_cos"),
                          (lambda t: t["info"]["name"] == "past_key_0" and t["info"]["quantizeParams"]["scaleOffset"].update(
                               scale=1.0), "share each layer's KV encoding")):
        desc = json.loads(good)
        for t in desc["info"]["graphs"][0]["info"]["graphInputs"]:
            edit(t)
        decode_json.write_text(json.dumps(desc))
        with pytest.raises(BuildError, match=message):
            wrap_context(d, pairs, "sm8650", tmp_path / "x", names)
    assert not (tmp_path / "x").exists()


def test_embedder_w8a16_matches_float_and_compiles(tiny_builds, tmp_path):
    out = tmp_path / "bert_w8a16"
    result = quantize_model_dir(tiny_builds["bert"], "w8a16", samples=SAMPLES, out=out, progress=False)
    assert result["metrics"]["embedding_cosine_min"] >= 0.99
    texts = ["the cat sat on the mat", "a tyre pressure warning light", "hello", "what is in the box?", "x"]
    ref = Embedder(tiny_builds["bert"]).embed(texts).vectors
    got = Embedder(out).embed(texts).vectors
    for i in range(len(texts)):
        assert cosine(got[i], ref[i]) >= 0.99, texts[i]
        assert abs(np.linalg.norm(got[i]) - 1.0) < 0.01  # still unit vectors (short texts were clipped once)
    # the query bucket is quantized with the main graph's encodings: one question, either graph
    quantized = Embedder(out)
    assert [g.name for g in quantized.graphs] == ["embed", "embed_1x32"]
    one, main = quantized.embed(texts[:1]).vectors, quantized.embed(texts[:1], buckets=False).vectors
    assert cosine(one[0], main[0]) >= 0.9999
    compile_model_dir, record_target, _ = _htp()
    entry = compile_model_dir(out, ["sm8650"], shared=False, fp16=False)
    assert entry.builds[0].placement["embed"]["cpu"] == 0
    assert entry.builds[0].placement["embed_1x32"]["cpu"] == 0  # the bucket compiles like the main graph
    record_target(out, entry)
    sim_embedder = Embedder(out, RuntimeOptions(backend="htp"))
    sim = sim_embedder.embed(texts).vectors
    for i in range(len(texts)):
        assert cosine(sim[i], got[i]) >= 0.999
    assert cosine(sim_embedder.embed(texts[:1]).vectors[0], one[0]) >= 0.999  # the bucket's context binary
    # a wrapped QAIRT binary of the main graph alone: the model has no bucket and still embeds queries
    from build_scripts.wrap_context import wrap_context

    binary, qnn_name = _utility_json(out / entry.builds[0].graphs["embed"], {}, tmp_path / "embed.json")
    wrapped = wrap_context(out, [(binary, tmp_path / "embed.json")], "sm8650", tmp_path / "wrapped",
                           {"embed": qnn_name})
    assert [g.name for g in wrapped.graphs] == ["embed"]
    alone = Embedder(tmp_path / "wrapped", RuntimeOptions(backend="htp"))
    assert [g.name for g in alone.graphs] == ["embed"]
    assert cosine(alone.embed(texts[:1]).vectors[0], sim[0]) >= 0.9999


# ------------------------------------------------------------------------------------------------
# block weights (w4a16, int8 blocks: LPBQ) and recipe files
# ------------------------------------------------------------------------------------------------

# int8 blocks, each with its own scale (the grid of a GGUF Q8_0 tensor; docs/benchmarks.md)
W8_BLOCKS = {"base": "w8a16", "block_size": 64, "name": "w8a16-b64"}


@pytest.mark.parametrize("recipe,dtype,qmax,targets", [("w4a16", TensorProto.INT4, 7, TARGETS),
                                                       (W8_BLOCKS, TensorProto.INT8, 127, TARGETS[:1])],
                         ids=["int4", "int8"])
def test_block_weights_compile_to_lpbq_and_run(tiny_builds, tmp_path, monkeypatch, recipe, dtype, qmax, targets):
    out = tmp_path / "llama_blocks"
    result = quantize_model_dir(tiny_builds["llama"], recipe, samples=SAMPLES, out=out, progress=False,
                                eval_samples=4)
    q = load_manifest(out).quantization.ptq.model_dump()
    blocked = q["weights"]["blocked"]
    assert len(blocked) == 7 * 2 and set(blocked.values()) == {64}  # q k v o gate up down, both layers
    assert q["weights"]["tensors"]["lm_head"]["type"] == "int16"
    assert q["weights"]["tensors"]["embed"]["type"] == "int16"
    g = _graph(out, "decode")
    inits = {t.name: t for t in g.graph.initializer}
    node = next(n for n in g.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "layers.0.up.weight_t_blockq")
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs == {"axis": 0, "block_size": 64} and len(node.input) == 2  # symmetric: no zero point
    assert inits["layers.0.up.weight_t_blockq"].data_type == dtype
    assert list(inits["layers.0.up.weight_t_blockscale"].dims) == [1, 128]  # [K/64, N]
    codes = numpy_helper.to_array(inits["layers.0.down.weight_t_blockq"], base_dir=str(out)).astype(np.int32)
    assert codes.min() >= -qmax - 1 and codes.max() <= qmax and np.abs(codes).max() >= qmax // 2
    down = numpy_helper.to_array(inits["layers.0.down.weight_t_blockscale"])  # [K/64, N], K = 128
    steps = down / (down.max(axis=0) / 16)
    assert down.shape[0] == 2 and steps.min() >= 1
    if dtype == TensorProto.INT4:
        # int4 block scales on HTP's LPBQ grid (a 4-bit multiple of a per-channel scale), so the NPU
        # runs exactly the weights measured here: checked where a channel has several blocks
        assert np.allclose(steps, np.rint(steps), atol=1e-3) and len(np.unique(np.rint(steps))) > 2
    else:  # int8 block scales are each block's own (HTP keeps them): max |float weight| / 127
        w = read_initializers(tiny_builds["llama"] / "decode.onnx", ["layers.0.down.weight_t"])["layers.0.down.weight_t"]
        np.testing.assert_allclose(down, np.abs(w.reshape(2, 64, -1)).max(axis=1) / 127, rtol=1e-6)
    # random weights say little about int4 accuracy (see the issue); it must still track float
    assert result["metrics"]["logits_cosine"] >= (0.9 if dtype == TensorProto.INT4 else 0.99)
    compile_model_dir, record_target, qnn = _htp()
    lpbq = {"enable_block_quant_weight_optimization": "1"}
    device = compile_model_dir(out, targets[:1], shared=True, fp16=False)  # LPBQ: turned on for blocked weights
    assert device.builds[0].provider_options == lpbq
    assert all(p["cpu"] == 0 for p in device.builds[0].placement.values())
    entry = compile_model_dir(out, targets, shared=False, fp16=False)  # the simulator's: int4 LPBQ may segfault it
    assert [b.target for b in entry.builds] == targets
    assert all(b.provider_options == ({} if dtype == TensorProto.INT4 else lpbq) for b in entry.builds)
    assert all(p["cpu"] == 0 for b in entry.builds for p in b.placement.values())
    record_target(out, entry)
    cpu, htp = Decoder(out), Decoder(out, RuntimeOptions(backend="htp", target=targets[0]))
    prompt = [5, 17, 42, 8, 99, 23, 7]
    assert cosine(cpu.feed(prompt), htp.feed(prompt)) >= 0.999
    assert cosine(cpu.feed([11]), htp.feed([11])) >= 0.999


@pytest.mark.parametrize("dtype", [TensorProto.INT4, TensorProto.INT8], ids=["int4", "int8"])
def test_cpu_backend_runs_block_weights_at_float_precision(tmp_path, dtype):
    """ONNX Runtime turns a block-wise DequantizeLinear + MatMul into MatMulNBits and by default
    quantizes its activations to int8 there; the NPU's are 16-bit, so the CPU reference of a
    block-quantized HTP graph must compute in float: x @ dequantized W to float32 precision
    (int8 activations miss by ~1e-2 relative)."""
    from runtime.session import GraphSession

    rng = np.random.default_rng(0)
    k, n, block = 256, 64, 32
    qmax = 7 if dtype == TensorProto.INT4 else 127
    q = rng.integers(-qmax - 1, qmax + 1, (k, n)).astype(np.int8)
    scale = rng.uniform(0.5, 2.0, (k // block, n)).astype(np.float32) / qmax
    raw = pack_int4(q) if dtype == TensorProto.INT4 else q.tobytes()
    weight = TensorProto(name="w_q", data_type=dtype, dims=[k, n], raw_data=raw)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=0, block_size=block),
         onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "block_matmul",
        [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, k])],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, n])],
        [weight, numpy_helper.from_array(scale, "w_scale")])
    path = tmp_path / "block_matmul.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)]), str(path))
    x = rng.standard_normal((1, 4, k)).astype(np.float32) * np.linspace(0.01, 10, k, dtype=np.float32)
    y = GraphSession(path).run({"x": x})["y"]
    ref = x.astype(np.float64) @ (q * np.repeat(scale, block, axis=0)).astype(np.float64)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("recipe,dtype,lpbq", [("w8a16", TensorProto.INT8, {"enable_block_quant_weight_optimization": "1"}),
                                               ("w4a16-gguf", TensorProto.INT4, {})],
                         ids=["int8", "int4"])
def test_source_grid_runs_the_gguf_blocks_exactly_and_compiles(tiny_builds, tmp_path, monkeypatch, recipe, dtype, lpbq):
    """A Q4_1 GGUF (SmolLM2's type) under w8a16 (or w4a16-gguf): every linear weight is
    int8 (int4) codes with the file's own block scales plus a float min term over the input's block
    sums, which together rebuild the float graphs' weights (dequantized by gguf); the graph compiles
    fully for HTP (int4: float block scales, not LPBQ, which would re-round them) and the simulator
    agrees with the CPU."""
    src = tiny_builds["llama_q41"]
    out = tmp_path / "q41_grid"
    result = quantize_model_dir(src, recipe, samples=SAMPLES, out=out, progress=False, eval_samples=4)
    tensors = load_manifest(out).quantization.ptq.model_dump(exclude_none=True)["weights"]["tensors"]
    linear = [w for w, t in tensors.items() if t["role"] == "linear"]
    assert len(linear) == 7 * 2 and all(tensors[w]["granularity"] == "gguf Q4_1 block32" for w in linear)
    mins = [w.replace(".weight_t", ".mins_t") for w in linear]
    assert all(tensors[m] == {"role": "min term", "type": "float"} for m in mins)
    g = _graph(out, "decode").graph
    inits = {t.name: t for t in g.initializer}
    assert all(inits[f"{w}_blockq"].data_type == dtype for w in linear)
    value = lambda name: numpy_helper.to_array(inits[name], base_dir=str(out)).astype(np.float32)
    floats = read_initializers(src / "decode.onnx", linear)
    for w, m in zip(linear, mins):
        codes = value(f"{w}_blockq")  # [K, N]
        assert codes.min() >= -8 and codes.max() <= 7  # Q4_1's 16 levels, centred
        rebuilt = codes * np.repeat(value(f"{w}_blockscale"), 32, axis=0) + np.repeat(value(m), 32, axis=0)
        np.testing.assert_allclose(rebuilt, floats[w], rtol=0, atol=1e-5 * np.abs(floats[w]).max())
    # the min-term path is float: block sums of the float norm output, no Q/DQ in between
    producers = {o: n for n in g.node for o in n.output}
    mins_matmul = next(n for n in g.node if n.name == "/layers.0/attn/v/mins")
    assert producers[mins_matmul.input[0]].op_type == "ReduceSum" and mins_matmul.input[1] == "layers.0.v.mins_t"
    assert producers[producers[mins_matmul.input[0]].input[0]].op_type == "Reshape"
    assert result["metrics"]["logits_cosine"] >= 0.999
    compile_model_dir, record_target, qnn = _htp()
    entry = compile_model_dir(out, TARGETS[:1], shared=False, fp16=False)
    assert all(p["cpu"] == 0 for b in entry.builds for p in b.placement.values())
    assert all(b.provider_options == lpbq for b in entry.builds)
    record_target(out, entry)
    cpu, htp = Decoder(out), Decoder(out, RuntimeOptions(backend="htp", target=TARGETS[0]))
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 290, size=21)]
    lc, lh = cpu.feed(prompt), htp.feed(prompt)
    for step in range(6):  # the CPU's greedy tokens through both
        assert cosine(lc, lh) >= 0.999, (step, cosine(lc, lh))
        top2 = np.sort(lc)[-2:]
        assert int(np.argmax(lh)) == int(np.argmax(lc)) or top2[1] - top2[0] < 0.2  # or a near tie
        lc, lh = cpu.feed([int(np.argmax(lc))]), htp.feed([int(np.argmax(lc))])


def test_linear_layers_with_the_widest_outputs_stay_float(w8, tiny_builds, tmp_path):
    """float_range: a linear layer whose calibrated output (any graph but the start graph) reaches
    it stays float, weight included; the others are quantized as before. The threshold is set
    between the two widest linear outputs the w8a16 build recorded, so exactly one layer qualifies."""
    ranges = json.loads((w8["dir"] / "quantization_ranges.json").read_text())
    linear = {f"/layers.{i}/{p}" for i in range(2) for p in ("attn/q", "attn/k", "attn/v", "attn/o", "mlp/gate",
                                                                  "mlp/up", "mlp/down")}
    reach = {n: max(max(abs(r[f"{n}/output_0"]["min"]), abs(r[f"{n}/output_0"]["max"]))
                    for g, r in ranges.items() if g != "start") for n in linear}
    widest, second = sorted(reach, key=reach.get, reverse=True)[:2]
    assert reach[widest] > reach[second] and reach[widest] < 256  # the built-in range chose none here
    out = tmp_path / "llama_wide"
    threshold = (reach[widest] + reach[second]) / 2
    result = quantize_model_dir(tiny_builds["llama"], {"base": "w8a16", "float_range": threshold}, samples=SAMPLES,
                                out=out, progress=False, eval_samples=4)
    q = load_manifest(out).quantization.ptq.model_dump()
    assert q["recipe"]["keep_float"][-1] == widest and widest not in RECIPES["w8a16"].keep_float
    weight = f"{widest.split('/')[1]}.{widest.rsplit('/', 1)[1]}.weight_t"  # /layers.1/mlp/down -> layers.1.down
    assert q["weights"]["tensors"][weight]["type"] == "float"
    assert sum(t["type"] == "int8" for t in q["weights"]["tensors"].values()) == len(linear) - 1
    node = next(n for n in _graph(out, "decode").graph.node if n.name == widest)
    assert node.input[1] == weight  # the float initializer itself, no DequantizeLinear
    assert result["metrics"]["logits_cosine"] >= 0.999


def test_recipe_file_overrides_and_in_place_quantization(tiny_builds, tmp_path):
    d = tmp_path / "llama"
    shutil.copytree(tiny_builds["llama"], d)
    recipe = tmp_path / "keep_first_block.json"
    recipe.write_text(json.dumps({
        "base": "w4a16", "name": "w4a16-first-block-8bit",
        "overrides": {"layers.0.*.weight_t": {"quant_type": "int8"},
                      "/layers.1/mlp/silu/output_0": {"quant_type": "uint16", "rmin": -1.0, "rmax": 8.0}},
        "keep_float": [],  # every node integer again (the built-ins keep the residual stream float)
    }))
    result = quantize_model_dir(d, recipe, samples=12, progress=False, evaluate=False)  # in place
    assert result["model_dir"] == str(d.resolve()) and not result["metrics"]
    m = load_manifest(d)
    q = m.quantization.ptq.model_dump(exclude_none=True)
    assert q["recipe"]["name"] == "w4a16-first-block-8bit" and q["recipe"]["block_size"] == 64
    tensors = q["weights"]["tensors"]
    assert tensors["layers.0.down.weight_t"] == {"role": "linear", "type": "int8", "symmetric": True,
                                                  "granularity": "per-channel"}
    assert tensors["layers.1.down.weight_t"]["granularity"] == "block64"
    assert set(q["overrides"]) >= {"layers.0.q.weight_t", "/layers.1/mlp/silu/output_0"}
    silu = json.loads((d / "quantization_ranges.json").read_text())["decode"]["/layers.1/mlp/silu/output_0"]
    assert silu["type"] == "uint16"
    enc = {n.input[0]: n for n in _graph(d, "decode").graph.node if n.op_type == "QuantizeLinear"}
    scale = numpy_helper.to_array(next(t for t in _graph(d, "decode").graph.initializer
                                       if t.name == enc["/layers.1/mlp/silu/output_0"].input[1]))
    assert float(scale) == pytest.approx(9.0 / 65535, rel=1e-4)  # the pinned range, not the calibrated one
    assert len(_quantized_residuals(d / "decode.onnx")) == 4  # 2 layers x (attention, MLP)
    assert not (d / "htp").exists() and m.target.backend == "cpu" and not m.target.builds
    assert Decoder(d).feed([5, 6, 7]).shape == (m.architecture.vocab,)
    with pytest.raises(BuildError, match="already quantized"):
        quantize_model_dir(d, "w8a16", progress=False)


def test_w4a16_mixed_keeps_value_and_down_projections_at_8_bits():
    mixed = resolve_recipe("w4a16-mixed")
    assert (mixed.linear_weights, mixed.block_size) == ("int4", 64)
    for layer in (0, 27):
        assert mixed.matching(f"layers.{layer}.v.weight_t") == {"quant_type": "int8"}
        assert mixed.matching(f"layers.{layer}.down.weight_t") == {"quant_type": "int8"}
        assert mixed.matching(f"layers.{layer}.q.weight_t") is None  # int4 blocks


def test_recipe_errors(tmp_path):
    with pytest.raises(BuildError, match="unknown quantization recipe"):
        resolve_recipe("w3a7")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"base": "w8a16", "overrides": {"x": {"quant_type": "int3"}}}))
    with pytest.raises(BuildError, match="int3"):
        resolve_recipe(bad)
    bad.write_text(json.dumps({"base": "w8a16", "linear_weights": "int16", "block_size": 64}))
    with pytest.raises(BuildError, match="block_size needs int4 or int8"):
        resolve_recipe(bad)
    bad.write_text(json.dumps({"base": "w8a16", "overrides": {"x": {"bits": 4}}}))
    with pytest.raises(BuildError, match="unknown setting"):
        resolve_recipe(bad)
    bad.write_text(json.dumps({"base": "w8a16", "keep_float": "/layers.*/*/residual"}))
    with pytest.raises(BuildError, match="keep_float must be a list"):
        resolve_recipe(bad)
    for reach in (-1, "256", True):
        bad.write_text(json.dumps({"base": "w8a16", "float_range": reach}))
        with pytest.raises(BuildError, match="float_range must be a number"):
            resolve_recipe(bad)
    assert resolve_recipe({"base": "w8a16", "float_range": 0}).float_range == 0


# ------------------------------------------------------------------------------------------------
# Calibration data
# ------------------------------------------------------------------------------------------------

def assert_retrieval_samples_are_the_apps_prompts(samples: list) -> None:
    """A retrieval sample is, to the character, the prompt the app builds for that FAQ entry as its
    one passage, with the default answer profile (app/answer: with_system, then with_passages)."""
    from app.answer.passages import Passage, with_passages
    from knowledge.profile import AnswerProfile
    from knowledge.prompts import answer_instructions, with_system

    rag = [s for s in samples if s.is_chat and s.messages[0]["role"] == "system"]
    assert rag
    for s in rag:
        told = with_system([{"role": "user", "content": s.question}], answer_instructions(AnswerProfile()))
        assert s.messages == with_passages(told, [Passage(1, None, s.question, s.answer, True)])
        assert s.plain() == f"{s.question}\n{s.answer}"  # what an embedder calibrates on: no prompt text


def test_calibration_text_split_chat_rendering_and_coverage(tiny_builds, tmp_path):
    calib, held, paths = cal.calibration_texts(None, None)
    assert [p.name for p in paths] == ["aurora_faq.jsonl", "aurora_manual.md"]
    key = lambda s: (s.text, s.answer)  # noqa: E731
    assert not {key(s) for s in held} & {key(s) for s in calib}  # held out means never calibrated on
    assert any(s.is_chat and s.messages[0]["role"] == "system" for s in calib)  # RAG-style prompts too
    assert_retrieval_samples_are_the_apps_prompts(calib)
    llm = LLM(tiny_builds["llama"])
    seqs = cal.tokenize_samples(llm, cal.pick(calib, 20), llm.context, 16, buckets=llm.decoder.buckets)
    chat = next(s for s in seqs if s.source == "aurora_faq.jsonl")
    assert llm.tokenizer.decode(chat.prompt, skip_special_tokens=False).startswith("<|im_start|>")
    assert all(len(s.prompt) + len(s.continuation) < llm.context for s in seqs)
    # every run of every graph goes through a range collector standing in for the float session
    graphs = load_manifest(tiny_builds["llama"]).graphs
    prepared = prepare_graphs(tiny_builds["llama"], graphs, tmp_path)
    hessians = HessianStore()
    collectors = {g.name: cal.RangeCollector(prepared[g.name], hessians=hessians,
                                             hessian_inputs=["/layers.0/attn/rms_norm/output_0"]) for g in graphs}
    data = cal.capture_llm(llm, seqs, collectors, start_graph="start")
    assert set(data.runs) == {"prefill_16", "prefill_4", "decode", "start"}
    assert data.runs["start"] == len(seqs)  # each sequence's first token, alone
    assert sum(data.runs.values()) > len(seqs) + 16 * 4  # ... and every other run, no sampling
    lo, hi = data.ranges["decode"]["/layers.0/attn/Softmax/output_0"]
    assert 0 <= lo < hi <= 1
    assert all(np.isfinite([r.lo, r.hi]).all() for r in data.key_ranges + data.value_ranges)
    h = hessians.h["/layers.0/attn/rms_norm/output_0"]
    assert h.shape == (64, 64) and hessians.rows["/layers.0/attn/rms_norm/output_0"] == sum(
        len(s.prompt) + len(s.continuation) - 1 for s in seqs)  # real tokens after position 0, no padding
    # --calib: a directory of the user's own text; a missing path is an error
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("The wipers park when the car is switched off.\n\nSecond paragraph.")
    own, _, files = cal.calibration_texts(tmp_path / "docs", None, with_generic_chat=False)
    assert [f.name for f in files] == ["notes.txt"] and own
    with pytest.raises(BuildError, match="no such file"):
        cal.calibration_texts(tmp_path / "missing.md", None)


def test_gptq_beats_round_to_nearest_on_the_layer_output():
    from build_scripts.quantize.gptq import gptq

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 16)) @ rng.standard_normal((16, 64))  # correlated inputs, like real ones
    x += 0.1 * rng.standard_normal(x.shape)
    w = rng.standard_normal((64, 48)).astype(np.float32)  # [K, N] as MatMul weights are stored
    h = x.T @ x
    for bits, group in ((8, None), (4, 16)):
        q, scale = gptq(w, h, bits=bits, group=group)
        qmax = 2 ** (bits - 1) - 1
        assert q.dtype == np.int8 and q.max() <= qmax and q.min() >= (-qmax - 1 if bits == 4 else -qmax)
        if group:
            assert scale.shape == (64 // group, 48)
            deq = q * np.repeat(scale, group, axis=0)
            ref_s = np.abs(w.reshape(4, group, 48)).max(axis=1) / qmax
            rtn = np.clip(np.rint(w / np.repeat(ref_s, group, axis=0)), -qmax - 1, qmax) * np.repeat(ref_s, group, axis=0)
        else:
            assert scale.shape == (48,)
            deq = q * scale[None, :]
            rtn = np.clip(np.rint(w / scale), -qmax, qmax) * scale  # the same grid, rounded to nearest
        err_gptq = np.linalg.norm(x @ deq - x @ w)
        err_rtn = np.linalg.norm(x @ rtn - x @ w)
        assert err_gptq < 0.8 * err_rtn, (bits, err_gptq, err_rtn)
