"""HTP compilation and the `htp` runtime backend, for real, on the x86 HTP simulator of the
onnxruntime-qnn wheel: tiny random-weight models only (the simulator is slow)."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime_qnn")

from build_scripts.compile import HTPCompileError, compile_graph, compile_model_dir, record_target  # noqa: E402
from build_scripts.errors import BuildError  # noqa: E402
from models.manifest import TargetSpec, load_manifest  # noqa: E402
from runtime import qnn  # noqa: E402
from runtime.decoder import Decoder  # noqa: E402
from runtime.embedder import Embedder  # noqa: E402
from runtime.errors import RuntimeModelError  # noqa: E402
from runtime.options import RuntimeOptions  # noqa: E402
from runtime.qnn_targets import TARGETS, UnknownTargetError, resolve_target  # noqa: E402
from runtime.session import GraphSession  # noqa: E402

TARGET = "sm8650"  # soc 57, v75
HTP = RuntimeOptions(backend="htp")
DECODE_STEPS = 8


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def htp_models(tiny_builds, tmp_path_factory):
    """Copies of the tiny llama / qwen2 / BERT / e5 builds, every graph compiled unshared for TARGET
    and recorded in the manifest."""
    root = tmp_path_factory.mktemp("htp_models")
    out = {}
    for key in ("llama", "qwen2", "bert", "e5"):
        d = root / key
        shutil.copytree(tiny_builds[key], d)
        entry = compile_model_dir(d, [TARGET], shared=False)
        record_target(d, entry)
        out[key] = d
    return out


def _build(model_dir, target=TARGET, variant="sim") -> dict:
    return qnn.select_build(load_manifest(model_dir).target, target, variant)


class _Recording:
    """A GraphSession wrapper that remembers it ran (to prove every bucket was used)."""

    def __init__(self, session, seq, log):
        self.session, self.seq, self.log = session, seq, log

    def run(self, feeds):
        self.log.append(self.seq)
        return self.session.run(feeds)


def _htp_decoder(model_dir, used: list) -> Decoder:
    """The runtime's Decoder on the htp backend (it loads the recorded EPContext build)."""
    dec = Decoder(model_dir, HTP)
    build = _build(model_dir)
    assert {s.path for s in dec.sessions.values()} == {model_dir / p for p in build.graphs.values()}
    dec.sessions = {seq: _Recording(sess, seq, used) for seq, sess in dec.sessions.items()}
    return dec


def _greedy(dec: Decoder, prompt: list[int], steps: int):
    logits = [dec.feed(prompt)]
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(dec.feed([tokens[-1]]))
    return tokens, logits


def test_compile_every_graph_fully_on_htp(htp_models):
    for key, d in htp_models.items():
        m = load_manifest(d)  # verify=True: the recorded files hash correctly
        build = _build(d)
        assert build.soc_model == 57 and build.htp_arch == 75 and not build.shared_weights
        assert set(build.graphs) == {g.name for g in m.graphs}
        for name, placement in build.placement.items():
            assert placement["cpu"] == 0 and placement["htp"] > 20, (key, name, placement)
        assert len(build.binaries) == len(m.graphs)  # unshared: one binary per graph
        for rel in [*build.graphs.values(), *build.binaries]:
            assert (d / rel).is_file()
        assert m.target.versions["qnn_sdk"] and m.target.versions["onnxruntime_qnn"]
        assert m.target.versions["qnn_build"].startswith("v" + m.target.versions["qnn_sdk"])


@pytest.mark.parametrize("key", ["llama", "qwen2"])
def test_htp_greedy_tokens_match_cpu(htp_models, key):
    # 21 prompt tokens span more than one prefill bucket (16 + the rest), then greedy decode;
    # a final 3-token turn goes through the 4-bucket, so every graph runs on the simulator
    rng = np.random.default_rng(7)
    prompt = [int(t) for t in rng.integers(3, 290, size=21)]
    turn = [int(t) for t in rng.integers(3, 290, size=3)]
    cpu = Decoder(htp_models[key])
    used: list[int] = []
    htp = _htp_decoder(htp_models[key], used)
    cpu_tokens, cpu_logits = _greedy(cpu, prompt, DECODE_STEPS)
    htp_tokens, htp_logits = _greedy(htp, prompt, DECODE_STEPS)
    cpu_logits.append(cpu.feed(turn))
    htp_logits.append(htp.feed(turn))
    assert used.count(1) >= DECODE_STEPS and {16, 4, 1} <= set(used)
    assert htp_tokens == cpu_tokens
    for step, (a, b) in enumerate(zip(htp_logits, cpu_logits)):
        assert cosine(a, b) >= 0.999, f"step {step}: cosine {cosine(a, b):.6f}"
    assert int(np.argmax(htp_logits[-1])) == int(np.argmax(cpu_logits[-1]))


@pytest.mark.parametrize("key", ["bert", "e5"])
def test_htp_embedder_matches_cpu(htp_models, tiny_builds, key):
    d = htp_models[key]
    texts = ["the cat sat on the mat", "a tyre pressure warning light", "hello", "what is in the box?", "中文 充电"]
    ref = Embedder(d).embed(texts).vectors
    emb = Embedder(d, HTP)  # the EPContext build recorded in the manifest
    assert emb.session.path == d / _build(d).graphs["embed"]
    got = emb.embed(texts).vectors
    # a model without an HTP build: its ONNX graph is compiled when the session is created
    jit = Embedder(tiny_builds[key], RuntimeOptions(backend="htp", soc_model=57)).embed(texts).vectors
    for i in range(len(texts)):  # every batch row, including the padded second batch
        assert cosine(got[i], ref[i]) >= 0.999
        assert cosine(jit[i], ref[i]) >= 0.999


def test_ep_context_model_matches_compile_time_session(htp_models):
    d = htp_models["llama"]
    cpu = GraphSession(d / "decode.onnx")
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in load_manifest(d).graph("decode").inputs:
        if spec.dtype == "int32":
            feeds[spec.name] = rng.integers(3, 200, size=spec.shape).astype(np.int32)
        else:
            feeds[spec.name] = (rng.standard_normal(spec.shape) * 0.5).astype(np.float32)
    feeds["attention_mask"][:] = 0.0
    ctx = GraphSession(d / _build(d).graphs["decode"], HTP)
    # the same graph compiled in-process with the options compile.py uses
    fresh = GraphSession(d / "decode.onnx", RuntimeOptions(backend="htp", soc_model=57), htp_arch=75,
                         provider_options={"htp_graph_finalization_optimization_mode": "3"})
    a, b, ref = ctx.run(feeds), fresh.run(feeds), cpu.run(feeds)
    assert ctx.output_names == fresh.output_names == cpu.output_names
    for name in ctx.output_names:
        assert np.array_equal(a[name], b[name]), name
        assert cosine(a[name], ref[name]) >= 0.999, name


def _trilu_graph(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="double"),
             helper.make_node("Trilu", ["a"], ["b"], name="causal_trilu", upper=0),
             helper.make_node("Mul", ["b", "x"], ["y"], name="scale")]
    model = helper.make_model(helper.make_graph(nodes, "trilu", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


def test_unsupported_op_is_named(tmp_path):
    _trilu_graph(tmp_path / "trilu.onnx")
    with pytest.raises(BuildError, match="causal_trilu") as info:
        compile_graph(tmp_path / "trilu.onnx", tmp_path / "out" / "trilu_ctx.onnx", 57,
                      keep_log=tmp_path / "trilu.log")
    assert isinstance(info.value, HTPCompileError)
    assert "Trilu" in str(info.value) and "\n" not in str(info.value)
    report = info.value.reports[0]
    assert [(r.name, r.op_type) for r in report.rejected] == [("causal_trilu", "Trilu")]
    assert "not supported" in report.rejected[0].reason
    assert report.placements == {"double": "QNN", "causal_trilu": "CPU", "scale": "QNN"}
    assert not (tmp_path / "out" / "trilu_ctx.onnx").exists()
    assert "Validation FAILED" in (tmp_path / "trilu.log").read_text()


def test_second_target_compiles(htp_models, tmp_path):
    d = tmp_path / "llama"
    shutil.copytree(htp_models["llama"], d)
    entry = compile_model_dir(d, ["8elite"], shared=False)  # sm8750, soc 69, v79
    build = next(b for b in entry.builds if b.target == "sm8750")
    assert (build.soc_model, build.htp_arch) == (69, 79)
    assert all(p["cpu"] == 0 for p in build.placement.values())
    assert {b.target for b in entry.builds} == {"sm8650", "sm8750"}  # merged with the recorded one
    # the simulator runs it too
    prompt = [5, 6, 7, 8, 9]
    record_target(d, entry)
    dec = Decoder(d)
    want = dec.feed(prompt)
    dec.reset()
    dec.sessions = {g.seq: GraphSession(d / build.graphs[g.name], HTP) for g in dec.manifest.graphs}
    assert cosine(dec.feed(prompt), want) >= 0.999


def test_shared_weights_build_has_one_binary(htp_models, tmp_path):
    d = tmp_path / "llama"
    shutil.copytree(htp_models["llama"], d)
    entry = compile_model_dir(d, [TARGET], shared=True)
    build = next(b for b in entry.builds if b.variant == "shared")
    assert build.shared_weights and len(build.graphs) == 3
    assert len(build.binaries) == 1
    bins = list((d / "htp" / TARGET / "shared").glob("*.bin"))
    assert len(bins) == 1 and qnn.binary_graph_count(bins[0]) == 3
    for rel in build.graphs.values():
        assert qnn.inspect_graph(d / rel).binaries == (bins[0],)
    # one shared binary is smaller than the three unshared ones together
    sim = next(b for b in entry.builds if b.variant == "sim")
    assert sum(build.binaries.values()) < sum(sim.binaries.values())
    # the simulator would crash on it: the runtime refuses it with a clear message instead
    with pytest.raises(RuntimeModelError, match="simulator"):
        GraphSession(d / build.graphs["decode"], HTP)


def test_target_table():
    assert TARGETS["sm8650"] == TARGETS[57] == TARGETS["8gen3"] == resolve_target("Snapdragon 8 Gen 3")
    expected = {"sm8350": (30, 68), "sm8450": (36, 69), "sm8550": (43, 73), "sm8650": (57, 75),
                "sc8380xp": (60, 73), "sm8750": (69, 79), "sm8850": (87, 81), "sa8295p": (39, 68)}
    for name, (soc, arch) in expected.items():
        t = resolve_target(name)
        assert (t.soc_model, t.htp_arch) == (soc, arch) and resolve_target(soc) is t and resolve_target(str(soc)) is t
    assert resolve_target("888").name == "sm8350" and resolve_target("xelite").name == "sc8380xp"
    assert resolve_target("8elite-gen5").name == "sm8850" and resolve_target("8gen1").name == "sm8450"
    with pytest.raises(UnknownTargetError, match="unknown HTP target"):
        resolve_target("sm9999")


def test_htp_session_errors_and_logging(htp_models, monkeypatch, capfd):
    d = htp_models["llama"]
    ctx = d / _build(d).graphs["decode"]
    from app.settings import RuntimeSettings

    with pytest.raises(RuntimeModelError, match="unknown QNN log level"):
        GraphSession(ctx, RuntimeOptions(backend="htp", log_level="loud"))
    # a float graph compiled at load needs the SoC
    with pytest.raises(RuntimeModelError, match="HEXRAG_QNN_SOC_MODEL") as info:
        GraphSession(d / "decode.onnx", HTP)
    assert "\n" not in str(info.value)
    # verbose QNN/ORT logging: HEXRAG_QNN_LOG_LEVEL, read by the settings
    capfd.readouterr()
    monkeypatch.setenv("HEXRAG_QNN_LOG_LEVEL", "verbose")
    GraphSession(ctx, RuntimeSettings().runtime("htp"))
    assert "[V:onnxruntime:" in capfd.readouterr().err
    monkeypatch.setenv("HEXRAG_QNN_LOG_LEVEL", "error")
    GraphSession(ctx, RuntimeSettings().runtime("htp"))
    assert "[V:onnxruntime:" not in capfd.readouterr().err
    # no QNN device
    with monkeypatch.context() as m:
        m.setattr(qnn.ort, "get_ep_devices", lambda: [])
        with pytest.raises(RuntimeModelError, match="found no device"):
            GraphSession(ctx, HTP)
    # no onnxruntime-qnn: a typed one-line error
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)
    with pytest.raises(RuntimeModelError, match="onnxruntime-qnn"):
        GraphSession(ctx, HTP)


def test_select_build(htp_models):
    entry = load_manifest(htp_models["llama"]).target
    assert qnn.select_build(entry).variant == "sim"  # x86: the simulator build
    with pytest.raises(RuntimeModelError, match="no HTP build for sm8750"):
        qnn.select_build(entry, "sm8750")
    with pytest.raises(RuntimeModelError, match="no HTP build"):
        qnn.select_build(TargetSpec())


def test_cli_generate_json_on_htp(htp_models):
    """`hexrag generate --backend htp --json` picks the recorded build; stdout stays pure JSON even
    though QNN's native libraries print banners."""
    import json
    import subprocess

    def run(backend):
        proc = subprocess.run([sys.executable, "-m", "app.cli", "generate", "--model", str(htp_models["qwen2"]),
                               "--prompt", "the car", "--max-tokens", "6", "--json", "--backend", backend],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    from runtime.llm import LLM

    llm = LLM(htp_models["qwen2"], HTP)
    expected = llm.generate(llm.encode("the car"), max_new_tokens=6).run().token_ids
    out = run("htp")
    assert out["token_ids"] == expected and out["completion_tokens"] == 6
    # fp16 on HTP vs fp32 on the CPU: the first tokens agree (later ones may flip on near-ties
    # of this random-weight model; the greedy test above checks logits step by step)
    assert out["token_ids"][:3] == run("cpu")["token_ids"][:3]


def test_qnn_profile_from_the_environment(htp_models, tmp_path, monkeypatch):
    """HEXRAG_QNN_PROFILE=DIR: every HTP session writes QNN's own profile, which runtime.profile sums."""
    import gc

    from app.settings import RuntimeSettings
    from runtime.profile import summarize_qnn

    monkeypatch.setenv("HEXRAG_QNN_PROFILE", str(tmp_path))
    d = htp_models["llama"]
    session = GraphSession(d / _build(d).graphs["decode"], RuntimeSettings().runtime("htp"))
    feeds = {s.name: np.zeros(s.shape, np.int32 if s.dtype == "int32" else np.float32)
             for s in load_manifest(d).graph("decode").inputs}
    for _ in range(3):
        session.run(feeds)
    del session
    gc.collect()  # QNN writes the profile when the session is released
    q = summarize_qnn(tmp_path / "decode_ctx.csv")
    assert q["runs"] == 3 and q["accelerator_us"] > 0
    names = [n["node"] for n in q["nodes"]]
    assert "/layers.*/attn/rms_norm" in names and not any("OpId" in n for n in names)
    assert abs(sum(n["share"] for n in q["nodes"]) - 1.0) < 1e-6


def test_one_plan_builds_quantizes_and_compiles(tiny_sources, tmp_path, monkeypatch):
    """build_model runs a whole BuildPlan: float graphs, w8a16 PTQ, HTP compilation of both variants,
    each recorded in the manifest, with no scratch build left beside the output. The steps pass the
    manifest on in memory: it is written once and every file hashed once, at the end."""
    import models.manifest as manifest_module
    from build_scripts.plan import BuildPlan, HtpBuild, HtpPtq, LLMShape, build_model

    hashed, saves, sha256_file, save = [], [], manifest_module.sha256_file, manifest_module.Manifest.save
    monkeypatch.setattr(manifest_module, "sha256_file", lambda path, *a: hashed.append(path) or sha256_file(path, *a))
    monkeypatch.setattr(manifest_module.Manifest, "save", lambda m, d: saves.append(d) or save(m, d))
    out, lines = tmp_path / "tiny", []
    plan = BuildPlan(weights=str(tiny_sources["llama"]), out=out, shape=LLMShape(context=64, prefill=(16,)),
                     quant=HtpPtq(recipe="w8a16", samples=8, eval_samples=0),
                     htp=HtpBuild(targets=(TARGET,), variant="both"), progress=False)
    manifest = build_model(plan, lines.append)
    assert len(saves) == 1 and sorted(p.name for p in hashed if p.name == "weights.data") == ["weights.data"]
    assert len(hashed) == len(set(hashed)) == len(manifest.files)  # every file of the build once, nothing else
    monkeypatch.undo()
    assert manifest.quantization.recipe == "w8a16" and manifest.context == 64
    assert [(b.target, b.variant) for b in manifest.target.builds] == [(TARGET, "sim"), (TARGET, "shared")]
    assert load_manifest(out) == manifest  # as written, and every file as hashed
    assert all((out / p).is_file() for p in _build(out).graphs.values())
    assert lines == [f"compiled tiny for {TARGET} (sim)", f"compiled tiny for {TARGET} (shared)"]
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]


def test_a_variant_compiled_before_a_failing_one_is_recorded(tiny_builds, tmp_path, monkeypatch):
    """`hexrag compile --variant both` writes its manifest once; when the shared variant fails after
    the sim one compiled, the sim build is still recorded, so the directory stays one the runtime loads."""
    import build_scripts.compile as compile_module
    from build_scripts.plan import HtpBuild, compile_model

    d = tmp_path / "llama"
    shutil.copytree(tiny_builds["llama"], d)
    real = compile_module.compile_model_dir

    def sim_only(model_dir, targets, shared, **kwargs):
        if shared:
            raise BuildError("the shared variant failed")
        return real(model_dir, targets, shared, **kwargs)

    monkeypatch.setattr(compile_module, "compile_model_dir", sim_only)
    with pytest.raises(BuildError, match="shared variant failed"):
        compile_model(d, HtpBuild(targets=(TARGET,), variant="both"))
    assert [(b.target, b.variant) for b in load_manifest(d).target.builds] == [(TARGET, "sim")]
