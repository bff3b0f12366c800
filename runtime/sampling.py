"""Next-token sampling: a pure function of logits, parameters, history and an RNG.

Any finite parameters within the checked ranges give a valid distribution: the logits are shifted
so the largest is 0 *before* the temperature divides them (a tiny temperature then sends the others
to -inf, not inf - inf = NaN), and non-finite logits never reach the softmax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    repetition_penalty: float = 1.0  # >1 discourages tokens seen in the last `penalty_window` tokens
    seed: int | None = None  # any integer: taken modulo 2**64, the generator's seed range (so -1 works)
    penalty_window: int = 64  # as llama.cpp: recent tokens only, so a RAG answer may still quote its context

    def __post_init__(self):
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:  # False for NaN too
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be finite and > 0, got {self.repetition_penalty}")

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(None if self.seed is None else self.seed % 2**64)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def apply_repetition_penalty(logits: np.ndarray, history: Sequence[int], penalty: float) -> np.ndarray:
    """CTRL-style: divide positive, multiply negative logits of seen tokens by the penalty."""
    if penalty == 1.0 or not len(history):
        return logits
    out = logits.copy()
    seen = np.unique(np.asarray(history, dtype=np.int64))
    out[seen] = _penalized(out[seen], penalty)
    return out


def _penalized(values: np.ndarray, penalty: float) -> np.ndarray:
    return np.where(values > 0, values / penalty, values * penalty)


def sample_next(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator,
                history: Sequence[int] = ()) -> int:
    if params.greedy:
        recent = history[-params.penalty_window:] if params.penalty_window else ()
        best = _greedy(np.asarray(logits), recent, params.repetition_penalty)
        if best is not None:
            return best
    with np.errstate(over="ignore"):  # overflow to +-inf is expected here and handled
        return _sample(np.asarray(logits, dtype=np.float64), params, rng, history)


def _greedy(x: np.ndarray, recent: Sequence[int], penalty: float) -> int | None:
    """The token `_sample` picks greedily, without its float64 copy of the whole vocabulary (a
    quarter of SmolLM2's host time per token): the penalty changes only the recent tokens, so the
    pick is the best other token or one of them. None when a logit is NaN (`_sample` handles it)."""
    if penalty == 1.0 or not len(recent):
        best = int(np.argmax(x))  # the first NaN, if there is one
        return None if np.isnan(x[best]) else best
    seen = np.unique(np.asarray(recent, dtype=np.int64))
    rest = x.copy()
    rest[seen] = -np.inf
    best = int(np.argmax(rest))
    penalized = x[seen].astype(np.float64)
    if np.isnan(rest[best]) or np.isnan(penalized).any():
        return None
    with np.errstate(over="ignore"):
        penalized = _penalized(penalized, penalty)
    ids = np.append(seen, best)
    values = np.append(penalized, np.float64(rest[best]))
    return int(ids[values == values.max()].min())  # np.argmax: the lowest id among equal values


def _sample(x: np.ndarray, params: SamplingParams, rng: np.random.Generator, history: Sequence[int]) -> int:
    recent = history[-params.penalty_window:] if params.penalty_window else ()
    x = apply_repetition_penalty(x, recent, params.repetition_penalty)
    # a huge penalty or a broken graph may give inf/NaN logits: NaN is never picked, inf is clipped
    x = np.nan_to_num(x, nan=-np.inf, posinf=np.finfo(np.float64).max, neginf=-np.inf)
    if params.greedy or not np.isfinite(x.max()):
        return int(np.argmax(x))
    if 0 < params.top_k < x.size:
        kth = np.partition(x, -params.top_k)[-params.top_k]
        x = np.where(x >= kth, x, -np.inf)
    # shift first: every value is <= 0, so any positive temperature keeps them in [-inf, 0]
    probs = np.exp((x - x.max()) / params.temperature)
    probs /= probs.sum()  # >= 1: the largest logit contributes exp(0)
    if params.top_p < 1.0:
        order = np.argsort(-probs)
        cumulative = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cumulative, params.top_p)) + 1]  # smallest set reaching top_p
        kept = np.zeros_like(probs)
        kept[keep] = probs[keep]
        probs = kept / kept.sum()
    return int(rng.choice(probs.size, p=probs))
