"""The decoder graphs, run by the runtime on ONNX Runtime's CPU EP, against the independent numpy
reference (tests/reference.py) computed straight from the source weights."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.decoder import Decoder
from tests.reference import RefDecoder

DECODE_STEPS = 16


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_greedy(model_dir, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """Prefill `prompt`, then greedy-decode `steps` tokens; logits after every fed position."""
    dec = Decoder(model_dir)
    logits = [dec.feed(prompt)]
    tokens = list(prompt)
    for _ in range(steps):
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(dec.feed([tokens[-1]]))
    return tokens, logits


def assert_matches_reference(ref: RefDecoder, tokens: list[int], logits: list[np.ndarray], n_prompt: int):
    # the reference is causal, so one pass gives the logits after each prefix
    expected = ref.logits(tokens)
    for step, got in enumerate(logits):
        pos = n_prompt - 1 + step
        assert cosine(got, expected[pos]) >= 0.9999, f"step {step}: cosine {cosine(got, expected[pos]):.6f}"
    # greedy choices agree wherever the reference's top-2 are not a near tie
    for step, got in enumerate(logits[:-1]):
        top2 = np.sort(expected[n_prompt - 1 + step])[-2:]
        if top2[1] - top2[0] > 1e-3:
            assert tokens[n_prompt + step] == int(np.argmax(expected[n_prompt - 1 + step]))


@pytest.mark.parametrize("key,source_kind", [
    ("llama", "gguf"), ("llama_q8", "gguf"), ("qwen2", "hf"), ("llama_hf", "hf")])
def test_tiny_decoder_matches_reference(tiny_sources, tiny_builds, key, source_kind):
    # 21 prompt tokens: a full 16-bucket, then the last 5 left-padded into the 16-bucket
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, 290, size=21)]
    tokens, logits = run_greedy(tiny_builds[key], prompt, DECODE_STEPS)
    src = tiny_sources[key]
    ref = RefDecoder.from_gguf(src) if source_kind == "gguf" else RefDecoder.from_hf(src)
    assert_matches_reference(ref, tokens, logits, len(prompt))


def test_partial_chunk_is_padded_and_masked(tiny_builds, tiny_sources):
    # 3 tokens go through the 4-bucket with one padding slot; logits must still be exact
    prompt = [10, 20, 30]
    tokens, logits = run_greedy(tiny_builds["llama"], prompt, 2)
    assert_matches_reference(RefDecoder.from_gguf(tiny_sources["llama"]), tokens, logits, len(prompt))


@pytest.mark.slow
def test_smollm2_matches_reference(smollm_gguf, smollm_build):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(smollm_build / "tokenizer.json"))
    text = ("<|im_start|>user\nMy tyre pressure warning light came on while driving on the motorway. "
            "The car is a hatchback with four passengers. What should I do first?<|im_end|>\n<|im_start|>assistant\n")
    prompt = tok.encode(text, add_special_tokens=False).ids
    assert len(prompt) > 32  # spans more than one prefill chunk
    tokens, logits = run_greedy(smollm_build, prompt, DECODE_STEPS)
    assert_matches_reference(RefDecoder.from_gguf(smollm_gguf), tokens, logits, len(prompt))
