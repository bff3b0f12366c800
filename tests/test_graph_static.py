"""Every graph is fully static after shape inference, and a model's graphs share one weight file."""

from __future__ import annotations

import json

import onnx
import pytest
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

from models.manifest import load_manifest


def graph_files(model_dir):
    return [model_dir / g.file for g in load_manifest(model_dir).graphs]


def assert_static(path):
    model = onnx.load(str(path))  # with weights: the inference reads some initializers
    inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=False, guess_output_rank=False)
    g = inferred.graph
    values = list(g.input) + list(g.output) + list(g.value_info)
    produced = {o for n in g.node for o in n.output}
    assert produced <= {v.name for v in values}, f"{path.name}: tensors without inferred shape"
    for v in values:
        dims = v.type.tensor_type.shape.dim
        assert v.type.tensor_type.HasField("shape"), f"{path.name}: {v.name} has no shape"
        assert all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), f"{path.name}: {v.name} is dynamic"


@pytest.mark.parametrize("key", ["llama", "qwen2", "bert", "e5"])
def test_tiny_graphs_are_static(tiny_builds, key):
    for path in graph_files(tiny_builds[key]):
        assert_static(path)


@pytest.mark.slow
def test_real_graphs_are_static(smollm_build, minilm_build):
    for path in graph_files(smollm_build) + graph_files(minilm_build):
        assert_static(path)


def test_graphs_share_one_weight_file(tiny_builds):
    model_dir = tiny_builds["llama"]
    manifest = load_manifest(model_dir)
    seen: dict[str, tuple] = {}
    for path in graph_files(model_dir):
        model = onnx.load(str(path), load_external_data=False)
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in t.external_data}
            assert info["location"] == manifest.weights_file
            ref = (info["offset"], info["length"])
            assert seen.setdefault(t.name, ref) == ref, f"{t.name} stored twice"
    stored = sum(int(length) for _, length in seen.values())
    size = (model_dir / manifest.weights_file).stat().st_size
    assert stored <= size < stored + 4096 * len(seen)  # only alignment padding on top


def test_manifest_describes_the_model(tiny_builds):
    m = load_manifest(tiny_builds["qwen2"])
    assert m.kind == "llm" and m.context == 64 and m.prefill_buckets == [16, 4]
    assert m.architecture.n_kv_heads == 2 and m.architecture.qkv_bias is True
    assert {g.kind for g in m.graphs} == {"prefill", "decode"}
    decode = m.graph("decode")
    names = {t.name: t for t in decode.inputs}
    assert names["past_key_0"].shape == [1, 2, 16, 64] and names["attention_mask"].shape == [1, 1, 1, 65]
    assert [t.name for t in decode.outputs][:3] == ["logits", "new_key_0", "new_value_0"]
    assert set(m.files) >= {"decode.onnx", "prefill_16.onnx", "weights.data", "tokenizer.json"}
    assert len(m.source.files) == 2  # the two safetensors shards, each with its sha256
    on_disk = json.loads((tiny_builds["qwen2"] / "manifest.json").read_text())
    assert on_disk["tokenizer"]["chat_template"] == "chat_template.jinja"
