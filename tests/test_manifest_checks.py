"""The runtime trusts only a manifest that matches the files on disk."""

from __future__ import annotations

import json
import shutil

import pytest

from models.manifest import ManifestError, load_manifest
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
    as 2); one that fails a check is named an earlier build to rebuild."""
    data = json.loads((model_copy / "manifest.json").read_text())
    assert data["schema_version"] == 2
    (model_copy / "manifest.json").write_text(json.dumps({**data, "schema_version": 1}))
    m = load_manifest(model_copy)
    assert m.schema_version == 1 and m.architecture.n_layers == data["architecture"]["n_layers"]
    m.save(model_copy)
    assert json.loads((model_copy / "manifest.json").read_text())["schema_version"] == 2
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


@pytest.mark.parametrize("key", ["llama", "llama_q41", "qwen2", "bert"])
def test_built_models_pass_the_check(tiny_builds, key):
    """Builders list every file they write, so their output passes the unlisted-file check."""
    assert "weights.data" in load_manifest(tiny_builds[key]).files
