"""Kept KV rows placed into a later prompt (passage KV), on both cache contracts: the NPU graphs'
"rows" (tiny float build) and the CPU target's in-place GroupQueryAttention (tiny int4 build).

Layer 0's keys and values depend on a token and its position only, so rows computed at one
position and re-rotated to another must equal the rows the graphs compute there; where the tokens
before them are the same, placing rows instead of prefilling them must not change the answer."""

from __future__ import annotations

import numpy as np
import pytest

from build_scripts.build import build_llm
from runtime.decoder import Decoder
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
