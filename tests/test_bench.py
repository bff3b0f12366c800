"""`hexrag eval --all --quick`, its baseline gate, `hexrag bench llm` and `hexrag bench build` on real
tiny models, no mocks. The quick report runs as a script would (a subprocess); the other commands
run in-process through click's CliRunner (each `python -m app.cli` costs seconds of imports), while
`bench llm` still starts one real process per system run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.bench.llm_speed import NOT_INSTALLED
from app.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "app" / "bench" / "baseline_quick.json"


def hexrag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def cli(*args: str):
    """`hexrag ARGS` in-process: .exit_code, .stdout, .stderr."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick report, compared with the committed baseline on the way (~40 s on two cores)."""
    out = tmp_path_factory.mktemp("eval") / "report.json"
    proc = hexrag("eval", "--all", "--quick", "--out", str(out), "--baseline", str(BASELINE))
    return proc, out


def test_quick_report_has_sane_values_and_passes_the_committed_baseline(quick_run):
    proc, out = quick_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "metrics within tolerance" in proc.stderr and "Traceback" not in proc.stderr
    r = json.loads(out.read_text())
    assert r["mode"] == "quick" and set(r) >= {"retrieval", "embedder_quantization", "llm_quantization", "answers",
                                               "rag_ttft", "speed", "gate", "commit", "seconds"}
    hybrid = next(x for x in r["retrieval"]["results"] if x["mode"] == "hybrid" and x["lang"] == "all")
    assert hybrid["questions"] >= 100 and 0.5 < hybrid["recall@5"] <= 1 and 0 < hybrid["mrr"] <= hybrid["recall@5"]
    assert r["embedder_quantization"]["embedding_cosine"] > 0.999
    llm = r["llm_quantization"]
    assert llm["logits_cosine"] > 0.995 and llm["greedy_agreement"] > 0.9 and abs(llm["perplexity_change"]) < 0.05
    t = r["rag_ttft"]
    # the tiny random embedder retrieves noise, which the answer layer may refuse before any prefill
    assert t["refused"] or (t["prompt_tokens"] > 0 and t["prefill_ms"] > 0)
    assert t["total_ms"] == pytest.approx(t["embed_ms"] + t["search_ms"] + t["prompt_ms"] + t["prefill_ms"], abs=0.5)
    assert 0 < r["speed"]["decode_ratio"] < 5
    assert set(r["gate"]) == set(json.loads(BASELINE.read_text())["gate"])


def test_injected_accuracy_regression_fails_naming_the_metric(quick_run, tmp_path):
    _, out = quick_run
    report = json.loads(out.read_text())
    baseline = json.loads(out.read_text())
    baseline["gate"]["retrieval.hybrid.recall@5"] = report["gate"]["retrieval.hybrid.recall@5"] + 0.05
    baseline["gate"]["llm.perplexity_change"] = report["gate"]["llm.perplexity_change"] - 0.05  # lower is better
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    proc = cli("eval", "--report", str(out), "--baseline", str(tmp_path / "baseline.json"))
    assert proc.exit_code == 1
    assert "FAIL retrieval.hybrid.recall@5" in proc.stderr and "FAIL llm.perplexity_change" in proc.stderr
    assert "2 metric(s) regressed" in proc.stderr and "Traceback" not in proc.stderr
    # the same drop passes with a tolerance that allows it
    proc = cli("eval", "--report", str(out), "--baseline", str(tmp_path / "baseline.json"), "--tolerance", "0.06")
    assert proc.exit_code == 0, proc.stderr


def test_eval_errors_are_one_line(quick_run, tmp_path):
    _, out = quick_run
    (tmp_path / "bad.json").write_text("{}")
    cases = [(("eval",), 2, "give --all"),
             (("eval", "--report", str(out), "--baseline", str(tmp_path / "bad.json")), 1, "not an eval report"),
             (("eval", "--report", str(out), "--baseline", str(out), "--tolerance", "x"), 1, "expected a number"),
             (("eval", "--all", "--llm", str(tmp_path)), 1, "no LLM at")]
    for args, code, message in cases:
        proc = cli(*args)
        assert proc.exit_code == code and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_bench_llm_prints_the_table_with_every_row(tiny_builds):
    proc = cli("bench", "llm", "--model", str(tiny_builds["llama"]), "--lengths", "8", "--gen", "4", "--runs", "1",
                  "--threads", "1", "--vs", "llama.cpp,genai")
    assert proc.exit_code == 0, proc.stderr[-2000:]
    rows = {line.split("|")[1].strip().rstrip(" *"): line for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| system")}
    assert set(rows) == {"hexrag", "llama.cpp", "genai"}
    cells = [c.strip() for c in rows["hexrag"].split("|")[2:-1]]
    assert len(cells) == 6  # TTFT@8, prefill, decode, decode min–max, RSS, load average min–max
    assert all(float(c) > 0 for c in cells[:3] + cells[4:5])
    low, high = (float(v) for v in cells[3].split("–"))
    assert 0 < low <= float(cells[2]) <= high and len(cells[5].split("–")) == 2
    assert "no background load from the benchmark" in proc.stdout
    for peer, module in (("llama.cpp", "llama_cpp"), ("genai", "onnxruntime_genai")):
        if importlib.util.find_spec(module) is None:
            assert NOT_INSTALLED in rows[peer]
    assert "not available: pass --genai-model" in rows["genai"] or NOT_INSTALLED in rows["genai"]


def test_bench_llm_errors_are_one_line(tiny_builds):
    model = str(tiny_builds["llama"])
    for args, message in [(("--lengths", "100"), "exceed the model's context 64"),
                          (("--vs", "vllm"), "unknown peer 'vllm'"),
                          (("--gen", "1", "--lengths", "8"), "--gen must be at least 2")]:
        proc = cli("bench", "llm", "--model", model, *args)
        assert proc.exit_code == 1 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    proc = cli("bench", "llm", "--model", str(tiny_builds["bert"]))
    assert proc.exit_code == 1 and "not an LLM" in proc.stderr


def test_bench_build_metrics_from_a_compiled_model(tiny_builds, tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    model = tmp_path / "llama"
    shutil.copytree(tiny_builds["llama"], model)
    proc = cli("bench", "build", "--model", str(model), "--json")  # no HTP build yet: ceilings only
    assert proc.exit_code == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["builds"] == [] and "hexrag compile" in r["note"]
    chips = {c["target"]: c for c in r["decode_ceiling"]["chips"]}
    assert chips["sm8750"]["bandwidth_gbs"] == 84.8 and chips["sm8750"]["tok_s"] > chips["sm8650"]["tok_s"] > 0

    assert cli("compile", str(model), "--target", "sm8650", "--variant", "both").exit_code == 0
    r = json.loads(cli("bench", "build", "--model", str(model), "--json").stdout)
    builds = {b["variant"]: b for b in r["builds"]}
    assert builds["sim"]["binaries"] == 3 and builds["shared"]["binaries"] == 1  # one per graph / one shared
    assert builds["sim"]["parts"] == builds["shared"]["parts"] == 1  # far below the part budget
    assert builds["sim"]["htp_node_share"] == builds["shared"]["htp_node_share"] == 1.0
    # weight sharing: prefill + decode in one binary stay far below three unshared copies
    assert builds["shared"]["binary_to_weights"] < builds["sim"]["binary_to_weights"] / 2
    assert r["decode_ceiling"]["weights_basis"].startswith("shared context binary")

    # without the compile record's placement counts the share comes from the EPContext models
    manifest = json.loads((model / "manifest.json").read_text())
    for b in manifest["target"]["builds"]:
        del b["placement"]
    (model / "manifest.json").write_text(json.dumps(manifest))
    proc = cli("bench", "build", "--model", str(model))
    assert proc.exit_code == 0 and "| sm8650 | sim | 3 | 100% |" in proc.stdout, proc.stdout

    # the same side-by-side command measures hexrag on HTP (here the x86 simulator, a tiny run)
    proc = cli("bench", "llm", "--model", str(model), "--backend", "htp", "--vs", "", "--lengths", "4", "--gen", "2",
               "--runs", "1", "--threads", "1")
    assert proc.exit_code == 0 and "hexrag on htp" in proc.stdout, proc.stderr
