"""Embedder query buckets: a second, small static graph for one short question, sharing the main
graph's weights file, picked by the runtime when it computes fewer padded tokens."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from build_scripts.build import build_embedder
from build_scripts.errors import BuildError
from models.manifest import load_manifest
from runtime.embedder import Embedder, pick_graph
from tests.test_cli_runtime import hexrag

QUESTION = "what is the tyre pressure"  # a few tokens: fits an 8-token bucket
TEXTS = [QUESTION, "hello", "the infotainment system pairs two phones at once over bluetooth " * 2,
         "a b c d e f g h i j k l", "x"]


@pytest.fixture(scope="module")
def bucketed(tiny_sources, tmp_path_factory):
    """The tiny BERT with a 4x32 main graph and a 1x8 query bucket, and the same without the bucket."""
    root = tmp_path_factory.mktemp("buckets")
    build_embedder(tiny_sources["bert"], root / "with", batch=4, seq=32, query=(1, 8))
    build_embedder(tiny_sources["bert"], root / "without", batch=4, seq=32, query=None)
    return root / "with", root / "without"


def _external(model_dir, file) -> dict[str, tuple[str, str]]:
    model = onnx.load(str(model_dir / file), load_external_data=False)
    return {t.name: ({e.key: e.value for e in t.external_data}["location"],
                     {e.key: e.value for e in t.external_data}["offset"])
            for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}


def test_bucket_is_recorded_and_shares_the_weights_file(bucketed):
    with_bucket, without = bucketed
    m = load_manifest(with_bucket)
    assert [(g.name, g.kind, g.file, g.batch, g.seq) for g in m.graphs] == [
        ("embed", "embed", "embed.onnx", 4, 32), ("embed_1x8", "embed", "embed_1x8.onnx", 1, 8)]
    assert m.graphs[1].inputs[0].shape == [1, 8] and m.graphs[1].outputs[0].shape == [1, m.architecture.hidden]
    main, query = _external(with_bucket, "embed.onnx"), _external(with_bucket, "embed_1x8.onnx")
    shared = set(main) & set(query)
    assert "word_embed" in shared and len(shared) == len(query) - 1  # all but the [1,8] position table
    assert all(main[n] == query[n] for n in shared)  # the same bytes of the one weights file
    assert {loc for loc, _ in (*main.values(), *query.values())} == {m.weights_file}
    # one copy of the weights: only the small position table is added to the file
    grown = (with_bucket / m.weights_file).stat().st_size - (without / m.weights_file).stat().st_size
    assert 0 < grown < (without / m.weights_file).stat().st_size / 10
    assert [g.name for g in load_manifest(without).graphs] == ["embed"]


def test_pick_graph_takes_the_fewest_padded_tokens(bucketed):
    graphs = load_manifest(bucketed[0]).graphs
    assert pick_graph(graphs, rows=1, longest=6).name == "embed_1x8"  # 8 tokens instead of 4x32
    assert pick_graph(graphs, rows=3, longest=8).name == "embed_1x8"  # 3 runs x 8 < 128
    assert pick_graph(graphs, rows=1, longest=9).name == "embed"  # too long for the bucket
    assert pick_graph(graphs, rows=4, longest=8).name == "embed_1x8"  # 4 runs x 8 < 128
    assert pick_graph(graphs, rows=4, longest=32).name == "embed"
    assert pick_graph(graphs[:1], rows=1, longest=3).name == "embed"


def test_bucket_vectors_match_the_main_graph(bucketed):
    with_bucket, without = bucketed
    emb = Embedder(with_bucket)
    assert [g.name for g in emb.graphs] == ["embed", "embed_1x8"]
    assert len(emb.encode_ids([QUESTION])[0][0]) <= 8
    one = emb.embed([QUESTION]).vectors  # the query path: one question, on the bucket
    main = emb.embed([QUESTION], buckets=False).vectors
    np.testing.assert_allclose(one, main, atol=1e-5)
    mixed = emb.embed(TEXTS)  # ingest-like: short and long texts in one call
    np.testing.assert_allclose(mixed.vectors, emb.embed(TEXTS, buckets=False).vectors, atol=1e-5)
    # a model built before buckets (main graph only) gives the same vectors
    old = Embedder(without)
    assert [g.name for g in old.graphs] == ["embed"]
    np.testing.assert_allclose(old.embed(TEXTS).vectors, mixed.vectors, atol=1e-5)
    assert old.model_id == emb.model_id  # same source weights: a KB built with one is searched with the other


def test_cli_query_shape(tiny_sources, tmp_path):
    out = tmp_path / "e"
    proc = hexrag("build", "embedder", "--weights", str(tiny_sources["bert"]), "--out", str(out),
                  "--batch", "2", "--seq", "16", "--query-shape", "1x64")
    assert proc.returncode == 0, proc.stderr
    assert "embed.onnx, embed_1x16.onnx" in proc.stdout  # L capped at --seq
    graphs = json.loads((out / "manifest.json").read_text())["graphs"]
    assert [(g["batch"], g["seq"]) for g in graphs] == [(2, 16), (1, 16)]
    bad = hexrag("build", "embedder", "--weights", str(tiny_sources["bert"]), "--out", str(tmp_path / "b"),
                 "--query-shape", "big")
    assert bad.returncode == 2 and "--query-shape" in bad.stderr and "1x32" in bad.stderr
    wide = hexrag("build", "embedder", "--weights", str(tiny_sources["bert"]), "--out", str(tmp_path / "w"),
                  "--batch", "2", "--seq", "16", "--query-shape", "4x8")
    assert wide.returncode == 1 and wide.stderr.strip().splitlines()[-1].startswith("error: --query-shape 4x8")
    assert not (tmp_path / "w").exists()


def test_build_refuses_a_bucket_wider_than_the_batch(tiny_sources, tmp_path):
    with pytest.raises(BuildError, match="between 1 and --batch"):
        build_embedder(tiny_sources["bert"], tmp_path / "x", batch=2, seq=16, query=(3, 8))


def test_embed_bench_reports_both_graphs(bucketed):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "runtime.embed_bench", "--model", str(bucketed[0]), "--runs", "3",
                           "--text", QUESTION], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "runtime's choice embed_1x8 (1x8)" in proc.stdout
    assert "main graph 4x32: median" in proc.stdout and "over 3" in proc.stdout and "load average" in proc.stdout
