"""The runtime trusts only a manifest that matches the files on disk."""

from __future__ import annotations

import json
import shutil

import pytest

from models.manifest import SCHEMA_VERSION, ManifestError, QuantizationSpec, load_manifest
from runtime.decoder import Decoder


@pytest.fixture
def model_copy(tiny_builds, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(tiny_builds["llama"], dst)
    return dst


def test_altered_file_is_refused(model_copy):
    with open(model_copy / "decode.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ManifestError, match="decode.onnx was altered"):
        Decoder(model_copy)


def test_missing_file_is_refused(model_copy):
    (model_copy / "weights.data").unlink()
    with pytest.raises(ManifestError, match="weights.data listed in the manifest is missing"):
        Decoder(model_copy)


def test_other_schema_version_is_refused(model_copy):
    data = json.loads((model_copy / "manifest.json").read_text())
    (model_copy / "manifest.json").write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(ManifestError, match="rebuild it"):
        load_manifest(model_copy)


def test_schema_1_loads_as_it_is_or_is_named_to_rebuild(model_copy):
    """Schema 1 had the JSON layout of 2 without its checks: a valid one loads (and is written back
    as the current schema); one that fails a check is named an earlier build to rebuild."""
    data = json.loads((model_copy / "manifest.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 3
    (model_copy / "manifest.json").write_text(json.dumps({**data, "schema_version": 1}))
    m = load_manifest(model_copy)
    assert m.schema_version == 1 and m.architecture.n_layers == data["architecture"]["n_layers"]
    m.save(model_copy)
    assert json.loads((model_copy / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION
    del data["architecture"]["rope_theta"]
    (model_copy / "manifest.json").write_text(json.dumps({**data, "schema_version": 1}))
    with pytest.raises(ManifestError, match=r"earlier hexrag \(manifest schema 1\).*rope_theta.*rebuild it"):
        load_manifest(model_copy)


def test_garbage_manifest_is_refused(model_copy):
    (model_copy / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not a valid manifest"):
        load_manifest(model_copy)


def test_file_whose_entry_was_removed_is_refused(model_copy):
    """Dropping a file's entry from the manifest must not turn off the check of that file."""
    data = json.loads((model_copy / "manifest.json").read_text())
    del data["files"]["weights.data"]
    (model_copy / "manifest.json").write_text(json.dumps(data))
    with open(model_copy / "weights.data", "r+b") as f:
        f.write(b"\x7f\x7f\x7f\x7f")
    with pytest.raises(ManifestError, match="weights.data not listed in the manifest"):
        Decoder(model_copy)


def test_file_added_after_the_build_is_refused(model_copy):
    (model_copy / "extra.onnx").write_bytes(b"not from the build")
    with pytest.raises(ManifestError, match="extra.onnx not listed"):
        load_manifest(model_copy)


@pytest.mark.parametrize("key", ["llama", "llama_q41", "qwen2", "bert", "e5"])
def test_built_models_pass_the_check(tiny_builds, key):
    """Builders list every file they write, so their output passes the unlisted-file check."""
    assert "weights.data" in load_manifest(tiny_builds[key]).files


# a w8a16 PTQ record as schema 2 wrote it: flat beside `recipe`, the metrics a second time (trimmed)
SCHEMA_2_PTQ = {
    "recipe": "w8a16", "activations": "uint16", "io": {},
    "recipe_spec": {"name": "w8a16", "linear_weights": "int8", "block_size": 0, "keep_float": ["/layers.*/*/residual"],
                    "overrides": {}, "source_grid": True, "float_range": 256.0},
    "weights": {"file": "weights.data", "bytes": 210, "float_bytes": 538,
                "tensors": {"layers.0.q.weight_t": {"role": "linear", "type": "int8", "symmetric": True,
                                                    "rounding": "source", "granularity": "gguf Q4_1 block32"},
                            "layers.0.q.mins_t": {"role": "min term", "type": "float"}},
                "blocked": {"layers.0.q.weight_t": 32}},
    "overrides": {},
    "calibration": {"sequences": 8, "tokens": 900, "sources": ["generic-chat"], "runs": {"decode": 80},
                    "files": [], "samples": 8, "decode_steps": 32, "capture_seconds": 10.5, "gptq": None,
                    "method": "MinMax", "held_out_every": 5},
    "quantize_seconds": {"decode": 17.0},
    "metrics": {"logits_cosine": 0.999},
    "report": ["quantization.md", "quantization_ranges.json"],
    "seconds": 68.1,
}


def test_a_schema_2_quantization_record_reads_into_the_typed_one():
    q = QuantizationSpec.model_validate(SCHEMA_2_PTQ)
    assert q.recipe == "w8a16" and q.ptq.recipe.source_grid and q.ptq.recipe.keep_float == ("/layers.*/*/residual",)
    assert q.ptq.weights.tensors["layers.0.q.weight_t"].rounding == "source"
    assert q.ptq.weights.blocked == {"layers.0.q.weight_t": 32} and q.ptq.calibration.runs == {"decode": 80}
    assert q.ptq.report == ["quantization.md", "quantization_ranges.json"] and q.ptq.seconds == 68.1
    dumped = q.model_dump(exclude_none=True)
    assert "metrics" not in dumped and "recipe_spec" not in dumped  # one place for each from now on
    assert QuantizationSpec.model_validate(dumped) == q  # and the typed shape reads back as it is
    cpu = QuantizationSpec.model_validate({"recipe": "int4", "format": "MatMulNBits", "accuracy_level": 4,
                                           "description": "GGUF blocks", "weights": {"Q4_1 exact": 14},
                                           "linear_bytes": 100})
    assert cpu.cpu_blocks and cpu.blocks.weights == {"Q4_1 exact": 14} and cpu.ptq is None
