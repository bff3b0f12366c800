"""The LLM engine on the CPU backend: greedy parity with the reference loop, prefix reuse, sampling,
stop strings, cancellation, overflow and a cache that is never reallocated."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from runtime.errors import ContextOverflowError
from runtime.llm import LLM
from runtime.sampling import SamplingParams
from tests.reference import RefDecoder

CHAT = [{"role": "user", "content": "Tell me a short story about a red car that learns to fly."}]


@pytest.fixture(scope="module")
def tiny_llm(tiny_builds) -> LLM:
    return LLM(tiny_builds["llama"])


def cold_run(model_dir, prompt, **kwargs):
    return LLM(model_dir).generate(prompt, **kwargs).run()


@pytest.mark.slow
def test_smollm2_greedy_equals_reference_loop(smollm_gguf, smollm_build):
    llm = LLM(smollm_build)
    prompt = llm.encode_chat(CHAT)
    result = llm.generate(prompt, max_new_tokens=32).run()
    expected = RefDecoder.from_gguf(smollm_gguf).greedy(prompt, 32, stop_ids=tuple(llm.stop_ids))
    got = result.token_ids + ([expected[-1]] if result.finish_reason == "stop" else [])
    assert got == expected
    assert len(result.token_ids) >= 16 and result.text.strip()


@pytest.mark.slow
def test_the_models_judgement_of_a_quote_is_its_yes_against_no_and_leaves_the_cache_as_it_was(smollm_gguf,
                                                                                              smollm_build):
    """app/answer/judge.py: the probability of "yes" against "no" at the first step of the judging prompt, as
    the float64 reference decoder gives it (over the whole vocabulary); the next answer is the same as if
    no judgement had been asked in between."""
    from app.answer.judge import answers_probability, judge_prompt, replies

    llm = LLM(smollm_build)
    prompt = llm.encode_chat(CHAT)
    before = llm.generate(prompt, max_new_tokens=12).run().token_ids
    question, text = "Where is the charge port?", "The charge port is on the left rear wing, above the rear wheel."
    p = answers_probability(llm, question, text)
    last = RefDecoder.from_gguf(smollm_gguf).logits(llm.encode_chat(judge_prompt(question, text)))[-1]
    probs = np.exp(last - last.max())
    yes, no = (sum(probs[t] for t in tokens) for tokens in replies(llm))
    assert p is not None and abs(p - yes / (yes + no)) < 0.03, (p, yes / (yes + no))
    assert llm.generate(prompt, max_new_tokens=12).run().token_ids == before


def test_prefix_reuse_is_token_identical(tiny_llm, tiny_builds):
    first = [int(t) for t in np.random.default_rng(1).integers(3, 290, size=23)]
    turn1 = tiny_llm.generate(first, max_new_tokens=6).run()
    second = first + turn1.token_ids + [int(t) for t in np.random.default_rng(2).integers(3, 290, size=9)]
    warm = tiny_llm.generate(second, max_new_tokens=10).run()
    assert warm.cached_tokens >= len(first) + len(turn1.token_ids) - 1
    cold = cold_run(tiny_builds["llama"], second, max_new_tokens=10)
    assert cold.cached_tokens == 0
    assert warm.token_ids == cold.token_ids
    # a prompt diverging inside the cached part rewinds to the common prefix only
    branched = first[:10] + [5, 6, 7]
    assert tiny_llm.generate(branched, max_new_tokens=4).run().token_ids == \
        cold_run(tiny_builds["llama"], branched, max_new_tokens=4).token_ids


def test_banned_tokens_are_never_chosen(tiny_llm):
    prompt = [10, 20, 30, 40]
    free = tiny_llm.generate(prompt, max_new_tokens=12).run().token_ids
    ban = frozenset(free[:3])
    held = tiny_llm.generate(prompt, max_new_tokens=12, ban=ban).run().token_ids
    assert len(held) == 12 and not ban & set(held)


def test_seeded_sampling_is_reproducible(tiny_llm):
    prompt = [10, 20, 30, 40]
    params = SamplingParams(temperature=1.5, top_k=50, top_p=0.95, seed=1234)
    a = tiny_llm.generate(prompt, max_new_tokens=12, sampling=params).run()
    b = tiny_llm.generate(prompt, max_new_tokens=12, sampling=params).run()
    c = tiny_llm.generate(prompt, max_new_tokens=12,
                          sampling=SamplingParams(temperature=1.5, top_k=50, top_p=0.95, seed=99)).run()
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_stop_string_spanning_two_tokens(tiny_llm):
    prompt = [50, 60, 70]
    free = tiny_llm.generate(prompt, max_new_tokens=12).run()
    tok = tiny_llm.tokenizer
    pieces = [tok.decode([t]) for t in free.token_ids]
    # a stop string made of the end of token i and the start of token i+1
    i = next(i for i in range(2, len(pieces) - 1) if pieces[i] and pieces[i + 1])
    stop = pieces[i][-1] + pieces[i + 1][0]
    text_before = "".join(pieces)[: "".join(pieces).find(stop)]
    stopped = tiny_llm.generate(prompt, max_new_tokens=12, stop=[stop]).run()
    assert stopped.finish_reason == "stop"
    assert stopped.text == text_before and stop not in stopped.text


def test_length_and_eos_finish_reasons(tiny_llm):
    r = tiny_llm.generate([1, 2, 3], max_new_tokens=3).run()
    assert (r.finish_reason, r.completion_tokens) == ("length", 3)
    eos = next(iter(tiny_llm.stop_ids))
    tiny_llm.stop_ids.add(r.token_ids[0])  # make the first answer token a stop token
    try:
        r2 = tiny_llm.generate([1, 2, 3], max_new_tokens=3).run()
    finally:
        tiny_llm.stop_ids.discard(r.token_ids[0])
        tiny_llm.stop_ids.add(eos)
    assert (r2.finish_reason, r2.token_ids) == ("stop", [])


def test_context_overflow_is_typed(tiny_llm):
    with pytest.raises(ContextOverflowError) as e:
        tiny_llm.generate(list(range(3, 3 + tiny_llm.context)), max_new_tokens=1)
    assert e.value.prompt_tokens == tiny_llm.context and e.value.context == tiny_llm.context
    # a long prompt fills the cache: generation ends with "length" at the context, never garbage
    r = tiny_llm.generate(list(range(3, 3 + tiny_llm.context - 2)), max_new_tokens=50).run()
    assert r.finish_reason == "length" and len(tiny_llm.decoder.tokens) == tiny_llm.context


def test_cancellation_stops_within_one_step(tiny_llm):
    cancel = threading.Event()
    gen = tiny_llm.generate([1, 2, 3], max_new_tokens=40, cancel=cancel)
    seen = 0
    for _ in gen:
        seen += 1
        if seen == 3:
            threading.Thread(target=cancel.set).start()
            threading.Event().wait(0.05)  # the other thread has set it before the next step
    assert gen.result.finish_reason == "cancelled"
    assert gen.result.completion_tokens <= 4


def test_kv_buffers_are_never_reallocated(tiny_llm):
    dec = tiny_llm.decoder
    cache = dec.cache

    def buffers():
        step = [a for io in dec.io.values() for a in (*io.inputs.values(), *io.outputs.values())]
        return [a.ctypes.data for a in cache.keys + cache.values + step]

    addresses = buffers()
    tiny_llm.generate(list(range(3, 39)), max_new_tokens=20).run()  # 16 + 16 + 4, then decode
    bindings = dict(dec._bindings)
    assert len(bindings) == len(dec.sessions)  # every graph ran through its I/O binding
    tiny_llm.generate([4, 5, 6], max_new_tokens=5).run()
    assert buffers() == addresses and dec._bindings == bindings  # bound once, never rebound
    # the KV inputs the graphs read are the cache's own buffers, not copies
    assert all(dec.io[1, 1].inputs[f"past_key_{i}"] is cache.keys[i] for i in range(dec.n_layers))


def test_streamed_deltas_are_utf8_safe(smollm_build):
    llm = LLM(smollm_build)
    text = "你好，世界 🚗 Grüße — ok"
    ids = llm.tokenizer.encode(text, add_special_tokens=False).ids
    from runtime.textstream import IncrementalDetokenizer

    detok = IncrementalDetokenizer(llm.tokenizer)
    deltas = [detok.push(i) for i in ids] + [detok.flush()]
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
