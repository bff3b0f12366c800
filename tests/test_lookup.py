"""Prompt-lookup decoding: drafts from the context, checked in one graph step, give the tokens of
one step per token (up to the rounding of the two kernels' paths)."""

from __future__ import annotations

import numpy as np
import pytest

from build_scripts import tiny_models as tm
from build_scripts.build import build_llm
from runtime.decoder import Decoder
from runtime.errors import RuntimeModelError
from runtime.llm import LLM
from runtime.lookup import PromptLookup
from runtime.options import RuntimeOptions
from runtime.sampling import SamplingParams
from tests.reference import RefDecoder
from tests.test_decoder_graphs import cosine


def test_draft_follows_the_latest_earlier_occurrence_of_the_longest_ngram():
    text = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    lookup = PromptLookup(text, max_draft=3)
    # "2 3" was last followed by 7 (index 8), but "1 2 3" (longer) by 4
    assert lookup.draft(10) == [4, 5, 9]
    assert lookup.draft(2) == [4, 5]  # the caller's limit wins over max_draft
    lookup.extend([4, 5])  # "... 1 2 3 4 5": "4 5" was followed by 9
    assert lookup.draft(10) == [9, 2, 3]
    lookup.extend([6])  # "5 6" never occurred, and 1-grams are not drafted from by default
    assert lookup.draft(10) == []
    assert PromptLookup([5, 6], max_draft=4).draft(4) == []  # an n-gram never matches itself
    assert PromptLookup([5, 5, 5], max_draft=4, min_ngram=1).draft(4) == [5]
    assert PromptLookup(text, max_draft=3).draft(0) == []
    with pytest.raises(ValueError, match="n-gram sizes"):
        PromptLookup(text, max_draft=3, max_ngram=1, min_ngram=2)


@pytest.fixture(scope="module")
def int4_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("lookup")
    tm.write_tiny_gguf(root / "q40.gguf", seed=12, tied=False, qtype="Q4_0")
    build_llm(root / "q40.gguf", root / "q40", context=96, prefill=(16, 4), progress=False, quant="int4")
    return root


def test_one_scoring_step_gives_every_position_the_logits_of_feeding(int4_build):
    dec = Decoder(int4_build / "q40")
    assert dec.scores_every_position
    rng = np.random.default_rng(3)
    prompt = [int(t) for t in rng.integers(3, 290, size=21)]
    extra = [int(t) for t in rng.integers(3, 290, size=7)]
    dec.feed(prompt)
    scored = dec.score(extra)
    assert scored.shape == (7, dec.vocab) and dec.tokens == prompt + extra
    after = dec.feed([5])  # the scoring step left the cache as feeding does
    one = Decoder(int4_build / "q40")
    fed = [one.feed(prompt)] + [one.feed([t]) for t in extra]
    expected = RefDecoder.from_gguf(int4_build / "q40.gguf").logits(prompt + extra + [5])
    for i in range(7):
        # each row is what a prefill of the text up to it gives (the same kernels), and close to
        # a one-token step's, which rounds differently
        one.reset()
        assert cosine(scored[i], one.feed(prompt + extra[:i + 1])) > 0.999999
        assert cosine(scored[i], fed[i + 1]) > 0.9999 and int(np.argmax(scored[i])) == int(np.argmax(fed[i + 1]))
        assert cosine(scored[i], expected[21 + i]) >= 0.995
    assert cosine(after, expected[-1]) >= 0.995
    dec.rewind(21)
    assert dec.score(extra[:1]).shape == (1, dec.vocab)
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        dec.score(list(range(3, 20)))


def test_drafted_generation_is_greedy_generation_token_for_token(int4_build):
    # random weights fall into loops: the answer repeats n-grams of itself, so drafts are accepted
    prompt = [int(t) for t in np.random.default_rng(8).integers(3, 290, size=12)] * 2
    llm = LLM(int4_build / "q40")
    plain = llm.generate(prompt, max_new_tokens=60).run()  # drafting is asked for per generation
    drafted = llm.generate(prompt, max_new_tokens=60, draft=True).run()
    assert drafted.token_ids == plain.token_ids and drafted.text == plain.text
    assert plain.drafted_tokens == 0 and drafted.accepted_tokens > 0
    assert drafted.drafted_tokens >= drafted.accepted_tokens
    # with a repetition penalty every check applies it over the history up to its own position
    penalised = [llm.generate(prompt, max_new_tokens=60, sampling=SamplingParams(repetition_penalty=1.3),
                              draft=d).run() for d in (False, True)]
    assert penalised[0].token_ids == penalised[1].token_ids
    # up to the context's very end: the same tokens, stopped at the same place
    long_prompt = prompt * 3 + prompt[:10]  # 82 of 96 slots
    ends = [llm.generate(long_prompt, max_new_tokens=60, draft=d).run() for d in (False, True)]
    assert ends[0].token_ids == ends[1].token_ids and ends[1].finish_reason == ends[0].finish_reason
    assert len(long_prompt) + len(ends[1].token_ids) <= 97
    # sampled answers decode one token per step
    sampled = llm.generate(prompt, max_new_tokens=20, sampling=SamplingParams(temperature=0.8, seed=1),
                           draft=True).run()
    assert sampled.drafted_tokens == 0
    assert LLM(int4_build / "q40", RuntimeOptions(draft_tokens=0)).generate(
        prompt, max_new_tokens=20, draft=True).run().drafted_tokens == 0  # drafting switched off


def test_a_cpu_build_from_before_decodes_without_drafts(int4_build, tmp_path):
    """A CPU build whose graph declares one scored position (built before 2026-12-03) still loads
    and answers, a token per step."""
    import shutil

    import onnx

    from models.manifest import load_manifest, sha256_file

    old = shutil.copytree(int4_build / "q40", tmp_path / "old")
    graph = onnx.load(str(old / "step.onnx"), load_external_data=False)
    for value, axis in ((next(i for i in graph.graph.input if i.name == "last_index"), 0), (graph.graph.output[0], 1)):
        dim = value.type.tensor_type.shape.dim[axis]
        dim.Clear()
        dim.dim_value = 1
    onnx.save(graph, str(old / "step.onnx"))
    m = load_manifest(old, verify=False)
    m.files["step.onnx"] = sha256_file(old / "step.onnx")
    m.save(old)
    llm = LLM(old)
    assert not llm.decoder.scores_every_position and LLM(int4_build / "q40").decoder.scores_every_position
    prompt = [int(t) for t in np.random.default_rng(8).integers(3, 290, size=12)] * 2
    result = llm.generate(prompt, max_new_tokens=20, draft=True).run()
    assert result.drafted_tokens == 0
    with pytest.raises(RuntimeModelError, match="built before 2026-12-03: rebuild it with `hexrag build llm`"):
        llm.decoder.score(prompt[:2])
    assert result.token_ids == LLM(int4_build / "q40").generate(prompt, max_new_tokens=20).run().token_ids


def test_graphs_that_score_one_position_decode_without_drafts(tiny_builds):
    llm = LLM(tiny_builds["llama"])  # the NPU graphs: logits of the last position only
    assert not llm.decoder.scores_every_position
    result = llm.generate([5, 6, 7, 5, 6, 7, 5, 6], max_new_tokens=8, draft=True).run()
    assert result.completion_tokens > 0 and result.drafted_tokens == 0
    with pytest.raises(RuntimeModelError, match="score only their last position; only the CPU target"):
        llm.decoder.score([5, 6])


def test_smollm2_voice_answers_draft_by_default_and_keep_their_facts(smollm_gguf, minilm_build, sample_kb,
                                                                       tmp_path):
    """The real CPU target: SmolLM2 int4 on the sample KB. By default voice answers draft and text
    answers decode a token per step; with `all` text answers draft too, report what they kept
    and state the facts they state without drafts. (Not always word for word: a check computes
    its logits as prefill does, which rounds differently from a one-token step.)"""
    from app.assistant import Assistant
    from app.bench.answers import format_summary, summarize
    from app.settings import Settings

    out = tmp_path / "smollm2-int4"
    build_llm(smollm_gguf, out, context=1024, prefill=(128,), progress=False, quant="int4")
    questions = {"What is the roadside assistance phone number?": "800-555-0199",
                 "What tyre pressure should I use with a full load?": "260 kPa",
                 "How far can I drive after using the sealant kit?": "80 km/h"}

    def answers(mode: str, voice: bool):
        assistant = Assistant(Settings(llm=out, embedder=minilm_build, kb=sample_kb, prompt_lookup=mode))
        done = []
        for q in questions:
            assistant.llm.decoder.reset()
            done.append(assistant.answer(q, voice=voice))
        return done

    default_text, default_voice = answers("voice", False), answers("voice", True)
    assert not any("drafted_tokens" in a.timings for a in default_text)
    assert sum(a.timings.get("accepted_tokens", 0) for a in default_voice) > 0
    drafted = answers("all", False)
    # drafting keeps every fact the answer states without it (which facts the 135M model gets right moves
    # with the kernels' rounding: two of these three since 2026-12-06's Q4_1 kernels, all three before)
    stated = [fact in plain.text for fact, plain in zip(questions.values(), default_text)]
    assert sum(stated) >= 2, [a.text for a in default_text]
    for fact, plain, a in zip(questions.values(), default_text, drafted):
        assert fact not in plain.text or fact in a.text, (plain.text, a.text)
    kept = [a.timings.get("accepted_tokens", 0) for a in drafted]
    assert sum(kept) > 0 and all(k <= a.timings.get("drafted_tokens", 0) for k, a in zip(kept, drafted))
    rows = [{"answerable": True, "refused": False, "grade": "correct", "lang": "en", "unsupported": [],
             "answer_ms": a.timings["total_ms"], "drafted_tokens": a.timings.get("drafted_tokens", 0),
             "accepted_tokens": a.timings.get("accepted_tokens", 0)} for a in drafted]
    summary = summarize(rows)
    assert summary["drafts"] == {"drafted": sum(r["drafted_tokens"] for r in rows), "accepted": sum(kept)}
    assert f"prompt lookup: {sum(kept)} of" in format_summary({**summary, "failing": []})

    # over HTTP: the voice model drafts and says so in usage.timings; the text model does not
    import httpx

    from tests.api_server import Server

    server = Server(out, minilm_build, sample_kb, tmp_path / "server.log")
    try:
        server.wait_ready()
        for model, drafts in (("hexrag-voice", True), ("hexrag", False)):
            r = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
                "model": model, "messages": [{"role": "user", "content": next(iter(questions))}]})
            assert r.status_code == 200, r.text
            assert "555 0199" in r.json()["choices"][0]["message"]["content"].replace("-", " ")
            timings = r.json()["usage"]["timings"]
            assert ("drafted_tokens" in timings) == drafts, timings
    finally:
        server.stop()


def test_bench_lookup_times_checks_and_measures_their_rounding(int4_build):
    from app.bench.lookup import check_cost, format_lookup, lead_shift

    llm = LLM(int4_build / "q40")
    cost = check_cost(llm, [1, 4], cached=20, repeats=2)
    assert set(cost) == {1, 4} and all(ms > 0 for ms in cost.values())
    prompts = [[int(t) for t in np.random.default_rng(s).integers(3, 290, size=10)] for s in (1, 2)]
    r = lead_shift(llm, prompts, steps=9)
    # every greedy step of both answers, checked again 7 at a time: the same model, so close
    assert r["positions"] == 18 and 0 <= r["shift_median"] <= r["shift_p99"] <= r["shift_max"] < 0.1
    assert r["other_pick"] == 0  # as the token-for-token test above finds on this model
    text = format_lookup({"model": "q40", "check_ms": cost, "rounding": r, "prompts": 2})
    assert "W  4" in text and "18 positions of 2 answers" in text
