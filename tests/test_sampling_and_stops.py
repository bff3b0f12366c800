"""Pure pieces of generation: sampling rules and the stop-string filter."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.sampling import SamplingParams, apply_repetition_penalty, sample_next
from runtime.textstream import StopStringFilter

LOGITS = np.array([1.0, 3.0, 2.5, -1.0, 0.5])


def draws(params, n=400):
    rng = np.random.default_rng(params.seed)
    return [sample_next(LOGITS, params, rng) for _ in range(n)]


def test_greedy_and_degenerate_limits_pick_the_argmax():
    assert set(draws(SamplingParams())) == {1}
    assert set(draws(SamplingParams(temperature=1.0, top_k=1, seed=0))) == {1}
    assert set(draws(SamplingParams(temperature=1.0, top_p=0.01, seed=0))) == {1}


def test_top_k_and_top_p_restrict_the_support():
    assert set(draws(SamplingParams(temperature=1.0, top_k=2, seed=0))) == {1, 2}
    # probabilities at T=1: ~[.07, .54, .33, .01, .04]: top_p 0.85 keeps exactly {1, 2}
    assert set(draws(SamplingParams(temperature=1.0, top_p=0.85, seed=0))) == {1, 2}
    assert len(set(draws(SamplingParams(temperature=1.0, seed=0)))) == 5


def test_sampling_frequencies_follow_the_softmax():
    p = np.exp(LOGITS) / np.exp(LOGITS).sum()
    counts = np.bincount(draws(SamplingParams(temperature=1.0, seed=5), n=4000), minlength=5) / 4000
    assert np.abs(counts - p).max() < 0.03


def test_repetition_penalty():
    out = apply_repetition_penalty(LOGITS, [1, 3], 2.0)
    assert out[1] == 1.5 and out[3] == -2.0 and out[2] == 2.5
    assert sample_next(LOGITS, SamplingParams(repetition_penalty=2.0), np.random.default_rng(), [1]) == 2


def test_greedy_picks_the_penalized_argmax_of_the_float64_logits():
    """The greedy pick (which skips the float64 copy of the vocabulary) against that copy's argmax,
    penalty applied, NaN never and +inf clipped: on ties, infinities and NaN among the logits."""
    rng = np.random.default_rng(11)
    for case in range(300):
        x = rng.integers(-3, 4, size=40).astype(np.float32) / 2  # many ties
        if case % 5 == 1:
            x[rng.integers(40, size=3)] = np.inf
        if case % 7 == 2:
            x[rng.integers(40, size=2)] = np.nan
        if case % 11 == 3:
            x[:] = -np.inf
        history = [int(t) for t in rng.integers(40, size=int(rng.integers(0, 12)))]
        penalty = float(rng.choice([1.0, 1.1, 2.0, 0.5, 1e300]))
        with np.errstate(over="ignore"):
            ref = apply_repetition_penalty(x.astype(np.float64), history, penalty)
        ref = np.nan_to_num(ref, nan=-np.inf, posinf=np.finfo(np.float64).max, neginf=-np.inf)
        got = sample_next(x, SamplingParams(repetition_penalty=penalty), np.random.default_rng(), history)
        assert got == int(np.argmax(ref)), (case, x, history, penalty)


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-2),
                                 dict(repetition_penalty=0)])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


def test_stop_filter_holds_back_partial_matches_and_never_emits_the_stop():
    f = StopStringFilter(["</answer>", "STOP"])
    out = [f.push(p) for p in ["Hello </an", "swer> tail"]]
    assert out == ["Hello ", ""] and f.stopped
    g = StopStringFilter(["STOP"])
    assert g.push("ST") == "" and g.push("ART ") == "START " and g.push("S") == "" and g.flush() == "S"


def test_stop_filter_earliest_match_wins():
    f = StopStringFilter(["b", "abc"])
    assert f.push("xxabc") == "xx"  # "abc" starts before "b"


@pytest.mark.parametrize("params", [SamplingParams(temperature=1e-320, seed=0),
                                    SamplingParams(temperature=1.0, repetition_penalty=5e-324, seed=0),
                                    SamplingParams(temperature=1e-320, repetition_penalty=1e300, seed=0)])
def test_extreme_but_valid_params_give_a_token_never_nan(params):
    # the logits of seen tokens become inf/0 and a tiny temperature overflows a naive softmax
    with np.errstate(invalid="raise"):  # NaN anywhere raises
        tokens = {sample_next(LOGITS, params, params.rng(), [1, 3]) for _ in range(50)}
    assert tokens <= set(range(LOGITS.size)) and len(tokens) == 1


def test_non_finite_logits_are_never_sampled():
    logits = np.array([np.nan, 1.0, np.inf, -np.inf, 0.0])
    params = SamplingParams(temperature=1.0, seed=0)
    assert {sample_next(logits, params, params.rng()) for _ in range(50)} == {2}
    assert sample_next(np.full(3, np.nan), params, params.rng()) in (0, 1, 2)


@pytest.mark.parametrize("seed,same_as", [(-1, 2**64 - 1), (2**64 + 5, 5), (2**200, 0)])
def test_any_integer_seed_maps_into_the_generator_range(seed, same_as):
    draw = lambda s: SamplingParams(temperature=1.0, seed=s).rng().integers(1 << 30, size=4).tolist()
    assert draw(seed) == draw(same_as)


@pytest.mark.parametrize("bad", [dict(temperature=float("inf")), dict(temperature=float("nan")),
                                 dict(top_p=float("nan")), dict(repetition_penalty=float("inf")),
                                 dict(repetition_penalty=float("nan"))])
def test_non_finite_params_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)
