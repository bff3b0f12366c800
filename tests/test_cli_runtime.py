"""`hexrag generate` / `hexrag embed` as scripts see them: JSON on stdout, clean errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from models.manifest import load_manifest
from runtime.embedder import Embedder
from runtime.llm import LLM


def hexrag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300)


def test_generate_json_matches_the_library(tiny_builds):
    model = tiny_builds["qwen2"]
    proc = hexrag("generate", "--model", str(model), "--prompt", "the car", "--max-tokens", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= {"token_ids", "text", "finish_reason", "prompt_tokens", "completion_tokens", "timings"}
    assert set(out["timings"]) == {"ttft_s", "prefill_tok_s", "decode_tok_s"}
    llm = LLM(model)
    expected = llm.generate(llm.encode("the car"), max_new_tokens=7).run()
    assert out["token_ids"] == expected.token_ids and out["text"] == expected.text
    assert out["finish_reason"] == expected.finish_reason and out["prompt_tokens"] == len(llm.encode("the car"))


def test_generate_chat_uses_the_template(tiny_builds):
    proc = hexrag("generate", "--model", str(tiny_builds["llama"]), "--prompt", "hi", "--chat",
                  "--max-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    llm = LLM(tiny_builds["llama"])
    assert json.loads(proc.stdout)["prompt_tokens"] == len(llm.encode_chat([{"role": "user", "content": "hi"}]))


def test_embed_json(tiny_builds):
    proc = hexrag("embed", "--model", str(tiny_builds["bert"]), "hello world", "the car", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    vectors = np.array(out["embeddings"])
    assert vectors.shape == (2, out["dim"]) and out["truncated"] == [False, False]
    np.testing.assert_allclose(vectors, Embedder(tiny_builds["bert"]).embed(["hello world", "the car"]).vectors,
                               atol=1e-5)


def test_runtime_errors_are_one_line(tiny_builds, tmp_path):
    proc = hexrag("generate", "--model", str(tmp_path), "--prompt", "x")
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "no manifest.json" in proc.stderr
    proc = hexrag("generate", "--model", str(tiny_builds["llama"]), "--prompt", "x " * 200)
    assert proc.returncode == 1 and "exceed the context of 64 tokens" in proc.stderr
    proc = hexrag("embed", "--model", str(tiny_builds["llama"]), "x")
    assert proc.returncode == 1 and "not an embedder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_setting_is_named_in_one_line(tiny_builds):
    import os

    for name, value, why in (("HEXRAG_PROMPT_LOOKUP", "sometimes", "'voice', 'all' or 'off'"),
                             ("HEXRAG_THREADS", "abc", "valid integer"),
                             ("HEXRAG_SPIN_US", "-1", "greater than or equal to 0")):
        env = {**os.environ, name: value}
        for args in (("ask", "hi", "--llm", str(tiny_builds["llama"])), ("serve", "--port", "1")):
            proc = subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                                  timeout=120, env=env)
            assert proc.returncode != 0 and f"{name}: Input should be" in proc.stderr and why in proc.stderr
            assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 4, proc.stderr


def test_build_quant_from_the_cli(tiny_sources, tmp_path):
    # PTQ for the NPU: the float build is quantized with real calibration text into --out
    calib = tmp_path / "notes.md"
    calib.write_text("\n\n".join(f"# Note {i}\n\nThe wipers park when the car is switched off; charge to {60 + i} "
                                   f"percent for daily use." for i in range(12)))
    out = tmp_path / "w8"
    proc = hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(out), "--context", "64",
                  "--prefill", "16,4", "--quant", "w8a16", "--calib", str(calib), "--calib-samples", "8")
    assert proc.returncode == 0, proc.stderr
    m = load_manifest(out)
    assert m.quantization.recipe == "w8a16" and "notes.md" in m.quantization.ptq.calibration.sources
    assert m.metrics.quantization.greedy_agreement is not None
    assert not list(tmp_path.glob(".w8*"))  # the float scratch build is gone
    # a device build may skip the held-out accuracy check (an hour for a real 135M model on 2 cores)
    proc = hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(tmp_path / "w8-fast"),
                  "--context", "64", "--prefill", "16", "--quant", "w8a16", "--calib", str(calib),
                  "--calib-samples", "8", "--eval-samples", "0")
    assert proc.returncode == 0, proc.stderr
    m = load_manifest(tmp_path / "w8-fast")
    assert m.quantization.recipe == "w8a16" and m.metrics.quantization.greedy_agreement is None
    # the CPU target: int4 graphs; HTP targets are refused for them, bad recipes before any work
    proc = hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(tmp_path / "i4"),
                  "--context", "64", "--prefill", "16", "--quant", "int4")
    assert proc.returncode == 0 and load_manifest(tmp_path / "i4").quantization.recipe == "int4", proc.stderr
    for bad, message in ((["--quant", "int4", "--target", "sm8650"], "MatMulNBits graphs for the CPU backend"),
                         (["--quant", "w3"], "unknown quantization recipe 'w3'")):
        proc = hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(tmp_path / "bad"), *bad)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "bad").exists()
