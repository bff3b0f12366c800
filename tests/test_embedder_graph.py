"""The BERT embedder graph (through runtime.Embedder on the CPU EP) against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from runtime.embedder import Embedder
from tests.reference import RefBert

TEXTS = [
    "How do I check the tyre pressure?",
    "Tyre pressure can be checked with a gauge at the valve.",
    "The infotainment system supports Bluetooth pairing with two phones at once.",
    "Charging stops automatically when the battery reaches the limit you set in the app.",
    "Why is the engine warning light flashing?",
    "x",
]  # 6 texts with batch 4: the last batch is padded


def reference_embeddings(source_dir, texts, max_len):
    tok = Tokenizer.from_file(str(source_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return RefBert.from_hf(source_dir).embed([tok.encode(t).ids[:max_len] for t in texts])


def check(model_dir, source_dir, texts):
    emb = Embedder(model_dir)
    got = emb.embed(texts)
    want = reference_embeddings(source_dir, texts, emb.seq)
    assert got.vectors.dtype == np.float32 and got.vectors.shape == want.shape
    np.testing.assert_allclose(np.linalg.norm(got.vectors, axis=1), 1.0, atol=1e-5)
    cos = np.sum(got.vectors * want, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, cos
    return got


def test_tiny_bert_matches_reference(tiny_builds, tiny_sources):
    check(tiny_builds["bert"], tiny_sources["bert"], ["hello world", "the car is fast", "a b c d e f"] * 2)


@pytest.mark.slow
def test_minilm_matches_reference(minilm_build, minilm_dir):
    got = check(minilm_build, minilm_dir, TEXTS)
    assert got.truncated == [False] * len(TEXTS)
    sims = got.vectors @ got.vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.2  # the tyre question is nearest the tyre answer


@pytest.mark.slow
def test_minilm_truncation_is_reported(minilm_build):
    emb = Embedder(minilm_build)
    long_text = "The quick brown fox jumps over the lazy dog. " * 40
    ids, truncated = emb.encode_ids([long_text, "short"])
    assert truncated == [True, False]
    assert len(ids[0]) == emb.seq and ids[0][-1] == emb.tokenizer.token_to_id("[SEP]")
