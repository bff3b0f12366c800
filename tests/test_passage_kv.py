"""Kept KV rows placed into a later prompt (passage KV), on both cache contracts: the NPU graphs'
"rows" (tiny float build) and the CPU target's in-place GroupQueryAttention (tiny int4 build).

Layer 0's keys and values depend on a token and its position only, so rows computed at one
position and re-rotated to another must equal the rows the graphs compute there; where the tokens
before them are the same, placing rows instead of prefilling them must not change the answer."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.answer.passage_kv import PASSAGE_KV_DIR
from build_scripts.build import build_llm
from runtime.decoder import Decoder
from runtime.errors import Interrupted
from runtime.llm import LLM
from tests.conftest import TINY_CONTEXT, TINY_PREFILL

RNG = np.random.default_rng(7)
PREFIX, PASSAGE, FILLER, TAIL = ([int(t) for t in RNG.integers(3, 290, size=n)] for n in (5, 7, 9, 4))


@pytest.fixture(scope="module", params=["rows", "inplace"])
def model(request, tiny_builds, tiny_sources, tmp_path_factory):
    if request.param == "rows":
        return tiny_builds["llama"]
    out = tmp_path_factory.mktemp("int4") / "llama_int4"
    build_llm(tiny_sources["llama"], out, context=TINY_CONTEXT, prefill=TINY_PREFILL, progress=False, quant="int4")
    return out


def test_placed_rows_are_rotated_to_their_new_position(model):
    dec = Decoder(model)
    dec.feed(PREFIX + PASSAGE)
    rows = dec.rows(len(PREFIX))
    assert rows.tokens == PASSAGE and rows.start == len(PREFIX)
    dec.reset()
    dec.feed(PREFIX + FILLER)
    dec.place(rows)
    assert dec.tokens == PREFIX + FILLER + PASSAGE and dec.cache.length == len(dec.tokens)

    reference = Decoder(model)
    reference.feed(PREFIX + FILLER + PASSAGE)
    start = len(PREFIX + FILLER)
    keys, values = dec.cache.read(start, start + len(PASSAGE))
    want_keys, want_values = reference.cache.read(start, start + len(PASSAGE))
    np.testing.assert_allclose(keys[0], want_keys[0], atol=2e-5)
    np.testing.assert_allclose(values[0], want_values[0], atol=2e-5)
    # deeper layers saw the filler in the reference and not in the kept rows: that is the approximation
    assert not np.allclose(keys[-1], want_keys[-1], atol=2e-5)


def test_generation_with_placed_rows_equals_prefill(model):
    prompt = PREFIX + PASSAGE + TAIL
    expected = LLM(model).generate(prompt, max_new_tokens=8).run()
    llm = LLM(model)
    rows = llm.kv_rows(PREFIX, PASSAGE)
    assert llm.decoder.tokens == PREFIX  # the prefix stays cached for the next prompt
    got = llm.generate(prompt, max_new_tokens=8, placed={len(PREFIX): rows}).run()
    assert got.token_ids == expected.token_ids
    assert got.placed_tokens == len(PASSAGE) and got.cached_tokens == len(PREFIX)
    with pytest.raises(ValueError, match="not of the prompt's tokens"):
        llm.generate(TAIL + PASSAGE + PREFIX, placed={len(PREFIX): rows})
    # from an empty cache, the prefix's own kept rows placed at 0 too: nothing but the tail is fed
    head = llm.kv_rows([], PREFIX)
    llm.decoder.reset()
    got = llm.generate(prompt, max_new_tokens=8, placed={0: head, len(PREFIX): rows}).run()
    assert got.token_ids == expected.token_ids
    assert got.placed_tokens == len(PREFIX + PASSAGE) and got.cached_tokens == 0


def test_a_request_interrupts_background_rows_and_answers_as_without_them(model):
    prompt = PREFIX + PASSAGE + TAIL
    expected = LLM(model).generate(prompt, max_new_tokens=8).run()
    llm = LLM(model)
    llm.kv_rows([], PREFIX)
    dec = llm.decoder
    running, interrupted = threading.Event(), threading.Event()
    execute, interrupt = dec._execute, dec.interrupt

    def held_step(*args):  # the background's step starts, and runs on once the request has interrupted it
        running.set()
        interrupted.wait(10)
        return execute(*args)

    def interrupting():
        interrupt()
        interrupted.set()

    dec._execute, dec.interrupt = held_step, interrupting
    stopped = []

    def background():
        try:
            llm.kv_rows(PREFIX, PASSAGE + FILLER, background=True)
        except Interrupted as e:
            stopped.append(e)

    worker = threading.Thread(target=background)
    worker.start()
    assert running.wait(10)
    dec._execute = execute  # the request's own steps run as usual
    got = llm.generate(prompt, max_new_tokens=8).run()
    worker.join(10)
    assert stopped and interrupted.is_set()
    assert got.token_ids == expected.token_ids  # the stopped step left nothing behind
    rows = llm.kv_rows(PREFIX, PASSAGE, background=True)  # with no request waiting it runs whole
    assert rows.tokens == PASSAGE and llm.decoder.tokens == PREFIX


def test_the_bench_times_questions_beside_a_fill_they_wait_for_or_interrupt(smollm_build):
    from runtime.bench import run_beside_fill

    llm = LLM(smollm_build)
    for mode in ("quiet", "wait", "interrupt"):
        waits = run_beside_fill(llm, 2, mode)
        assert len(waits) == 2 and all(w > 0 for w in waits), mode
    # the fill's thread is gone and no stop is left set: the model answers
    assert llm.generate(llm.encode("Hello"), max_new_tokens=2).run().completion_tokens >= 1


def test_kept_rows_survive_on_disk_per_model_and_prefix(tiny_builds, tmp_path):
    from app.answer.passage_kv import PassageKV

    llm = LLM(tiny_builds["llama"])
    store = PassageKV(llm, tmp_path / "kv")
    rows = store.rows(PREFIX, PASSAGE)
    assert store.computed == 1 and len(list((tmp_path / "kv").rglob("*.npz"))) == 1
    assert store.rows(PREFIX, PASSAGE) is rows and store.hits == 1

    reopened = PassageKV(llm, tmp_path / "kv")  # another process: from disk, not recomputed
    again = reopened.rows(PREFIX, PASSAGE)
    assert reopened.loaded == 1 and reopened.computed == 0 and again.tokens == PASSAGE
    fresh = LLM(tiny_builds["llama"]).kv_rows(PREFIX, PASSAGE)  # kept exactly (float32)
    for kept, want in zip(again.keys + again.values, fresh.keys + fresh.values):
        np.testing.assert_array_equal(kept, want)

    reopened.rows(FILLER, PASSAGE)  # other preceding tokens: other rows
    other_model = PassageKV(LLM(tiny_builds["qwen2"]), tmp_path / "kv")
    other_model.rows(PREFIX, PASSAGE)  # another model never reads this one's rows
    assert reopened.computed == 1 and other_model.computed == 1
    assert len(list((tmp_path / "kv").rglob("*.npz"))) == 3

    for path in (tmp_path / "kv").rglob("*.npz"):  # a damaged file is a miss, recomputed and replaced
        path.write_bytes(b"not an npz")
    damaged = PassageKV(llm, tmp_path / "kv")
    damaged.rows(PREFIX, PASSAGE)
    assert damaged.computed == 1 and PassageKV(llm, tmp_path / "kv").rows(PREFIX, PASSAGE).tokens == PASSAGE


def test_the_settings_offer_every_stored_precision_and_no_other():
    """The settings and the CLI name the precisions without loading the answer layer (ONNX Runtime): their
    list is the one the rows are stored at."""
    from typing import get_args

    from app.answer.passage_kv import PRECISIONS
    from app.settings import PassageKVPrecision

    assert get_args(PassageKVPrecision) == PRECISIONS


@pytest.mark.parametrize("precision", ["float16", "int8", "k6v8"])
def test_kept_rows_may_be_stored_compactly(tiny_builds, tmp_path, precision):
    """float16, or codes with a float16 scale and offset per KV head and channel (int8: 8 bits; k6v8:
    keys at 6 bits, four in three bytes, values at 8): the rows placed are the rows every later load
    gives, each value within half a step of the exact one."""
    from app.answer.passage_kv import PassageKV

    llm = LLM(tiny_builds["llama"])
    exact = PassageKV(llm, tmp_path / "kv").rows(PREFIX, PASSAGE)
    placed = PassageKV(llm, tmp_path / "kv", precision=precision).rows(PREFIX, PASSAGE)
    loaded = PassageKV(llm, tmp_path / "kv", precision=precision).rows(PREFIX, PASSAGE)
    files = list((tmp_path / "kv").rglob("*.npz"))
    assert len(files) == 2  # each precision its own file: asking for float32 never reads int8
    n_keys = len(exact.keys)
    for i, (got, again, want) in enumerate(zip(placed.keys + placed.values, loaded.keys + loaded.values,
                                               exact.keys + exact.values)):
        np.testing.assert_array_equal(got, again)
        assert got.dtype == np.float32 and got.shape == want.shape
        span = want.max(axis=-2, keepdims=True) - want.min(axis=-2, keepdims=True)
        codes = 63 if precision == "k6v8" and i < n_keys else 255
        step = np.abs(want) / 2 ** 10 if precision == "float16" else span / codes
        # float16's own rounding of the scale and offset: a thousandth of the channel's values at most
        assert np.all(np.abs(got - want) <= step / 2 + 1e-3 * np.abs(want).max(axis=-2, keepdims=True) + 1e-7)
    compact = [f for f in files if np.load(f)["k0"].dtype != np.float32]
    with np.load(compact[0]) as f:
        stored = sum(f[name].nbytes for name in f.files if name != "layers")
        assert f["k0"].dtype == (np.float16 if precision == "float16" else np.uint8)
    # a byte a code (3 bytes for four 6-bit ones, and the rows' shape) and 4 bytes a channel
    channels = sum(4 * a.shape[0] * a.shape[-1] for a in exact.keys + exact.values)
    assert stored == {"float16": exact.nbytes // 2,
                      "int8": sum(a.size for a in exact.keys + exact.values) + channels,
                      "k6v8": sum(-(-a.size // 4) * 3 + 12 for a in exact.keys)
                      + sum(a.size for a in exact.values) + channels}[precision]
    # the instructions' rows (from position 0) are shared by every answer: kept exact
    PassageKV(llm, tmp_path / "head", precision=precision).rows([], PREFIX)
    with np.load(next((tmp_path / "head").rglob("*.npz"))) as f:
        assert f["k0"].dtype == np.float32
    with pytest.raises(ValueError, match="precision"):
        PassageKV(llm, tmp_path / "kv", precision="int4")
    # int8 rows kept before 2026-12-05 (a scale per channel around 0) are read as they were written
    from app.answer.passage_kv import _unpack
    old = {"k0": np.array([[[-127, 64]]], np.int8), "k0s": np.array([[[0.5, 2.0]]], np.float32)}
    np.testing.assert_array_equal(_unpack(old, "k0"), [[[-63.5, 128.0]]])


def test_kept_rows_stay_within_their_disk_budget_least_recently_used_first(tiny_builds, tmp_path):
    import os
    import time

    from app.answer.passage_kv import PassageKV

    llm = LLM(tiny_builds["llama"])
    first = PassageKV(llm, tmp_path / "kv")
    first.rows(PREFIX, PASSAGE)
    size = next((tmp_path / "kv").rglob("*.npz")).stat().st_size
    store = PassageKV(llm, tmp_path / "kv", disk_bytes=int(2.5 * size))
    store.rows(FILLER, PASSAGE)
    time.sleep(0.05)  # mtimes apart
    assert PassageKV(llm, tmp_path / "kv").rows(PREFIX, PASSAGE).tokens == PASSAGE  # read from disk: used now
    store.rows(TAIL, PASSAGE)  # a third file: one must go, the least recently used (FILLER's)
    files = list((tmp_path / "kv").rglob("*.npz"))
    assert len(files) == 2 and sum(os.path.getsize(f) for f in files) <= 2.5 * size
    reader = PassageKV(llm, tmp_path / "kv")
    reader.rows(PREFIX, PASSAGE)
    reader.rows(TAIL, PASSAGE)
    assert reader.loaded == 2 and reader.computed == 0
    reader.rows(FILLER, PASSAGE)
    assert reader.computed == 1  # evicted: computed again


@pytest.mark.slow
def test_answers_place_their_passages_from_the_kb(smollm_build, minilm_build, sample_kb, tmp_path):
    """SmolLM2 on the sample KB: an answer keeps its passages' rows under the KB; a later question
    showing the same passage (after another question took over the cache) places them instead of
    prefilling them, and stays grounded."""
    import shutil

    from app.answer.passages import passage_prompt
    from knowledge.prompts import answer_instructions as told, with_system
    from app.assistant import Assistant
    from app.settings import Settings

    # without the rows other tests' answers kept in the shared sample KB (passage KV is on by default)
    kb = shutil.copytree(sample_kb, tmp_path / "kb", ignore=shutil.ignore_patterns(PASSAGE_KV_DIR))
    assistant = Assistant(Settings(llm=smollm_build, embedder=minilm_build, kb=kb))  # on by default
    first = assistant.answer("What is the roadside assistance phone number?")
    # computed on first use (a prefill of the passage alone), then placed like any kept rows
    assert first.timings["placed_tokens"] > 0 and assistant.passage_kv.computed >= 1
    assert len(list((kb / "passage_kv").rglob("*.npz"))) == assistant.passage_kv.computed
    assistant.answer("What tyre pressure should I use?")
    kept = assistant.passage_kv.computed, assistant.passage_kv.hits
    again = assistant.answer("Which number do I call for roadside assistance?")
    assert again.timings["placed_tokens"] > 0
    assert assistant.passage_kv.computed == kept[0] and assistant.passage_kv.hits > kept[1]  # from memory
    assert "800-555-0199" in first.text and "800-555-0199" in again.text
    assert "800-555-0199" in first.shown[0]  # the passages as the model read them, for the evals
    # a new conversation: the instructions' kept rows are placed as well, not prefilled again
    one_question = with_system([{"role": "user", "content": "?"}], told(assistant.kb.profile))
    instructions = passage_prompt(assistant.llm, one_question, [])
    assistant.llm.decoder.reset()
    fresh = assistant.answer("Which number do I call for roadside assistance?")
    assert fresh.timings["placed_tokens"] == again.timings["placed_tokens"] + len(instructions.prefix)
    assert assistant.passage_kv.computed == kept[0] and "800-555-0199" in fresh.text


@pytest.mark.slow
def test_answers_place_the_instructions_rows_without_passage_kv(smollm_build, minilm_build, sample_kb, tmp_path):
    """Without passage KV a new conversation still places the instructions' rows (kept in memory,
    nothing on disk), and answers as it does when they are prefilled."""
    import shutil

    from app.answer.passages import passage_prompt
    from knowledge.prompts import answer_instructions as told, with_system
    from app.assistant import Assistant
    from app.settings import Settings

    kb = shutil.copytree(sample_kb, tmp_path / "kb", ignore=shutil.ignore_patterns(PASSAGE_KV_DIR))
    assistant = Assistant(Settings(llm=smollm_build, embedder=minilm_build, kb=kb, passage_kv=False))
    one_question = with_system([{"role": "user", "content": "?"}], told(assistant.kb.profile))
    instructions = passage_prompt(assistant.llm, one_question, [])
    question = "What is the roadside assistance phone number?"
    first = assistant.answer(question)
    assistant.llm.decoder.reset()
    again = assistant.answer(question)
    assert first.timings["placed_tokens"] == again.timings["placed_tokens"] == len(instructions.prefix)
    assert assistant.passage_kv.computed == 1 and not (kb / "passage_kv").exists()
    # the server computes both answer styles' instructions at start-up: no question pays for them
    assistant.passage_kv.warm(assistant.kb.profile)
    assert assistant.passage_kv.computed == 2 and assistant.passage_kv.hits >= 1
    assistant.passage_kv = None  # prefilled as before
    assistant.llm.decoder.reset()
    prefilled = assistant.answer(question)
    assert "placed_tokens" not in prefilled.timings
    assert again.text == first.text == prefilled.text and "800-555-0199" in first.text


@pytest.mark.slow
def test_kb_passage_kv_keeps_every_chunk_once(smollm_build, tiny_builds, docs, tmp_path):
    """`hexrag kb passage-kv` computes one file per chunk and answer style, and nothing the second time."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "HEXRAG_KB": str(tmp_path / "kb"), "HEXRAG_EMBEDDER": str(tiny_builds["bert"]),
           "HEXRAG_LLM": str(smollm_build)}
    root = Path(__file__).resolve().parents[1]

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300,
                              cwd=root, env=env)

    assert cli("ingest", str(docs), "--quiet").returncode == 0
    first = cli("kb", "passage-kv")
    assert first.returncode == 0, first.stderr
    assert "text answers: 2 passages computed" in first.stdout and "voice answers: 2 passages computed" in first.stdout
    # each chunk's rows and the instructions' own, for each answer style
    assert len(list((tmp_path / "kb" / "passage_kv").rglob("*.npz"))) == 6
    again = cli("kb", "passage-kv", "--no-voice")
    assert "text answers: 0 passages computed, 2 already kept" in again.stdout, again.stdout
    env["HEXRAG_KB"] = str(tmp_path / "kb2")
    assert cli("ingest", str(docs), "--quiet").returncode == 0
    tight = cli("kb", "passage-kv", "--max-mb", "1")
    assert tight.returncode == 0 and "the disk budget (1 MB) is used up" in tight.stdout, tight.stdout


def test_the_server_keeps_every_passages_rows_in_the_background(smollm_build, tiny_builds, docs, tmp_path):
    """Without a command, a served KB's chunks get their rows for voice and text answers after start-up
    and an upload's chunks after its ingest, while questions are answered; nothing is computed twice."""
    import re
    import time

    import httpx

    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder
    from tests.api_server import Server

    kb = tmp_path / "kb"
    with KnowledgeBase.open(kb, Embedder(tiny_builds["bert"])) as base:
        base.ingest(docs, progress=False)
    rows = kb / PASSAGE_KV_DIR

    def kept(n: int) -> list:
        deadline = time.monotonic() + 120
        while len(files := sorted(rows.rglob("*.npz"))) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        return files

    srv = Server(smollm_build, tiny_builds["bert"], kb, tmp_path / "log.txt")
    try:
        srv.wait_ready()
        chat = {"messages": [{"role": "user", "content": "How do I change the wiper blades?"}], "max_tokens": 8}
        assert httpx.post(srv.url + "/v1/chat/completions", json=chat, timeout=120).status_code == 200
        # each of the 2 chunks for each answer style, and each style's instructions
        assert len(before := kept(6)) == 6
        upload = {"files": ("tyres.md", b"# Tyres\n\n## Pressure\n\nInflate the tyres to 240 kPa when cold.\n")}
        job = httpx.post(srv.url + "/v1/knowledge/documents", files=upload, timeout=60).json()
        assert srv.wait_job(job)["status"] == "succeeded"
        after = kept(8)
        time.sleep(1.0)  # a fill that would go on computing what it keeps already
        assert len(after) == 8 and set(before) < set(after) and sorted(rows.rglob("*.npz")) == after
    finally:
        srv.stop()
    # voice answers' rows after start-up, text answers' once the question asked for one (less the rows that
    # question computed on first use), then the upload's chunk in both styles
    fills = re.findall(r"kept passage rows: (\d+) computed", (tmp_path / "log.txt").read_text())
    assert len(fills) == 3 and fills[0] == fills[2] == "2", fills


def test_the_fill_keeps_text_answers_rows_once_text_answers_are_asked(tiny_builds, tmp_path):
    from app.answer.passage_kv import PassageKV

    llm = LLM(tiny_builds["llama"])
    store = PassageKV(llm, tmp_path / "kv")
    asked = []
    store.on_new_style = lambda: asked.append(1)
    store.answered(voice=True)
    assert store.styles() == (True,) and not asked  # a head unit that only speaks keeps voice rows alone
    store.answered(voice=False)
    store.answered(voice=False)
    assert store.styles() == (True, False) and asked == [1]  # the fill runs again, once
    assert PassageKV(llm, tmp_path / "kv").styles() == (True, False)  # remembered with the rows
    assert PassageKV(llm).styles() == (True,)  # no directory: nothing kept on disk, nothing remembered


def test_keeping_every_passage_stops_at_the_disk_budget_and_skips_what_is_kept(smollm_build, tiny_builds, docs,
                                                                               tmp_path):
    from app.answer.passage_kv import PassageKV, prepare
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    llm = LLM(smollm_build)
    with KnowledgeBase.open(tmp_path / "kb", Embedder(tiny_builds["bert"])) as kb:
        kb.ingest(docs, progress=False)
        tight = PassageKV(llm, tmp_path / "tight", disk_bytes=1)  # the instructions' rows fill it
        assert prepare(kb, tight, voice=False, progress=False) == (0, 0)
        assert len(list((tmp_path / "tight").rglob("*.npz"))) == 1 and tight.full
        store = PassageKV(llm, tmp_path / "rows")
        calls, rows = [], llm.kv_rows

        def interrupted_once(prefix, ids, background=False):  # a question came in during the first passage
            if background and len(calls) == 1:
                raise Interrupted("a request is waiting")
            return rows(prefix, ids, background)

        llm.kv_rows = interrupted_once
        assert prepare(kb, store, voice=False, progress=False, checkpoint=lambda: calls.append(1)) == (2, 0)
        assert len(calls) == 3 and not store.full  # the interrupted passage waited again, then was computed
        again = PassageKV(llm, tmp_path / "rows")  # another process: what is on disk counts as kept, unread
        assert prepare(kb, again, voice=False, progress=False) == (0, 2) and again.loaded == 1  # the instructions


def test_a_translation_places_its_instructions_kept_rows_and_says_the_same(smollm_build, monkeypatch):
    """Every translation of a question (app/answer/translation.py) starts with the same instructions and
    examples: with a store, their kept rows are placed instead of prefilled, and the model's tokens are
    the ones a full prefill gives (the rows sit at position 0, where they are what prefill makes)."""
    from app.answer import translation
    from app.answer.passage_kv import PassageKV

    llm = LLM(smollm_build)
    store = PassageKV(llm)
    runs = []
    real = llm.generate

    def generate(ids, **options):
        runs.append(real(ids, **options))
        return runs[-1]

    monkeypatch.setattr(llm, "generate", generate)
    question = "这个按钮是做什么用的？"
    plain = translation._translated(llm, question, False, None)
    llm.decoder.reset()
    kept = translation._translated(llm, question, False, store)
    first, second = (run.result for run in runs)
    assert first.placed_tokens == 0 and second.placed_tokens > 20 and store.computed == 1
    assert second.token_ids == first.token_ids and kept == plain
    llm.decoder.reset()
    translation._translated(llm, "那个灯是什么意思？", False, store)  # another question: the same rows
    assert runs[-1].result.placed_tokens == second.placed_tokens and store.computed == 1
