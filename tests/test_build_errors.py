"""Bad input to `hexrag build`: a one-line error naming the problem, exit 1, nothing left in --out."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES


def hexrag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300)


def assert_clean_failure(proc, out_dir, *needles: str):
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not out_dir.exists()
    assert not [p for p in out_dir.parent.iterdir() if p.name.startswith(f".{out_dir.name}.")]


def write_minimal_gguf(path, arch: str, qtype: GGMLQuantizationType = GGMLQuantizationType.F32):
    """A GGUF with llama-style hyper-parameters and a single tensor of type `qtype`."""
    w = GGUFWriter(str(path), arch)
    for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 256),
                       ("feed_forward_length", 512), ("attention.head_count", 4)):
        w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    block, type_size = GGML_QUANT_SIZES[qtype]
    if qtype == GGMLQuantizationType.F32:
        w.add_tensor("token_embd.weight", np.zeros((8, 256), np.float32))
    else:
        raw = np.zeros((8, 256 // block * type_size), np.uint8)
        w.add_tensor("token_embd.weight", raw, raw_shape=raw.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_missing_file(tmp_path):
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(tmp_path / "nope.gguf"), "--out", str(out)),
                         out, "no such file", "nope.gguf")


def test_truncated_gguf(tiny_sources, tmp_path):
    src = tmp_path / "cut.gguf"
    data = tiny_sources["llama"].read_bytes()
    src.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(src), "--out", str(out)), out, "truncated GGUF")


def test_not_a_gguf(tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(b"\x00" * 1000)
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(src), "--out", str(out)), out,
                         "neither a GGUF file, an E5S1 file nor a Hugging Face model directory")


def test_unsupported_gguf_architecture(tmp_path):
    src = tmp_path / "falcon.gguf"
    write_minimal_gguf(src, "falcon")
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(src), "--out", str(out)), out,
                         "unsupported GGUF architecture 'falcon'")


def test_unsupported_hf_architecture(tiny_sources, tmp_path):
    src = tmp_path / "mamba"
    shutil.copytree(tiny_sources["qwen2"], src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(src), "--out", str(out)), out,
                         "unsupported model_type 'mamba'")


def test_unsupported_quant_type(tmp_path):
    src = tmp_path / "iq2.gguf"
    write_minimal_gguf(src, "llama", GGMLQuantizationType.IQ2_XXS)
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(src), "--out", str(out)), out,
                         "token_embd.weight", "IQ2_XXS")


def test_wrong_kind_and_bad_options(tiny_sources, tmp_path):
    out = tmp_path / "out"
    assert_clean_failure(hexrag("build", "llm", "--weights", str(tiny_sources["bert"]), "--out", str(out)), out,
                         "hexrag build embedder")
    assert_clean_failure(hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(out),
                                "--prefill", "256", "--context", "64"), out, "--prefill")


def test_failed_rebuild_keeps_the_previous_model(tiny_sources, tmp_path):
    out = tmp_path / "model"
    ok = hexrag("build", "llm", "--weights", str(tiny_sources["llama"]), "--out", str(out),
                "--context", "32", "--prefill", "8")
    assert ok.returncode == 0, ok.stderr
    before = (out / "manifest.json").read_text()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_sources["llama"].read_bytes()[:5000])
    bad = hexrag("build", "llm", "--weights", str(cut), "--out", str(out))
    assert bad.returncode == 1 and "truncated GGUF" in bad.stderr
    assert (out / "manifest.json").read_text() == before


@pytest.mark.parametrize("args", [["build", "embedder", "--weights", "x"], ["build", "llm", "--out", "y"]])
def test_missing_required_option(args):
    proc = hexrag(*args)
    assert proc.returncode == 2 and "Missing option" in proc.stderr


def test_bad_part_budget_is_a_usage_error(tmp_path):
    proc = hexrag("compile", str(tmp_path), "--target", "sm8650", "--part-budget", "lots")
    assert proc.returncode == 2 and "not a size such as 1.5GB" in proc.stderr
