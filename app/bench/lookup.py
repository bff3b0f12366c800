"""`hexrag bench lookup`: what prompt lookup's checks cost and how they round, on one LLM build.

    cost      a check of W tokens (`Decoder.score`) beside a one-token step, after `cached` tokens,
              widths interleaved, medians
    rounding  real answer prompts (the assistant's own, one per question): greedy decoding a token
              per step, then the same tokens checked as prompt lookup checks them (the current
              token and the LLM's `draft_tokens` at a time): how far the leader's lead over the
              runner-up moves between the two, and at how many positions the check would pick
              another token (runtime/lookup.py says why they differ)
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def check_cost(llm, widths: list[int], cached: int = 400, repeats: int = 6) -> dict[int, float]:
    """Median ms of a check of each width (1: a one-token step) after `cached` tokens."""
    dec = llm.decoder
    ids = [int(t) for t in np.random.default_rng(0).integers(3, min(dec.vocab, 5000), size=cached + max(widths))]
    dec.reset()
    dec.feed(ids[:cached])
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(repeats):
        for w in widths:
            dec.rewind(cached)
            start = time.perf_counter()
            dec.score(ids[cached:cached + w])
            times[w].append((time.perf_counter() - start) * 1000)
    return {w: round(statistics.median(t), 1) for w, t in times.items()}


def _lead(row: np.ndarray, first: int, second: int) -> float:
    return float(row[first] - row[second])


def lead_shift(llm, prompts: list[list[int]], steps: int = 40) -> dict:
    """Over the greedy answers to `prompts`: how far checks move the lead (percentiles, logits) and
    how many positions they would pick another token at."""
    dec, width = llm.decoder, llm.draft_tokens + 1
    shifts, flips = [], 0
    for prompt in prompts:
        dec.reset()
        logits, answer, stepped = dec.feed(prompt), [], []
        for _ in range(steps):
            token = int(np.argmax(logits))
            if token in llm.stop_ids or len(dec.tokens) + width >= dec.context:
                break
            answer.append(token)
            logits = dec.feed([token])
            stepped.append(logits)
        dec.rewind(len(prompt))
        checked = [row for i in range(0, len(answer), width) for row in dec.score(answer[i:i + width])]
        for one, check in zip(stepped, checked):
            second, first = np.argsort(one)[-2:]
            shifts.append(abs(_lead(one, first, second) - _lead(check, first, second)))
            flips += int(np.argmax(check)) != first
    if not shifts:
        return {"positions": 0}
    pct = np.percentile(shifts, [50, 99])
    return {"positions": len(shifts), "shift_median": round(float(pct[0]), 3), "shift_p99": round(float(pct[1]), 3),
            "shift_max": round(max(shifts), 3), "other_pick": flips}


def measure(assistant, questions: list[str], widths: list[int]) -> dict:
    """Both measurements on the assistant's LLM, the rounding over its prompts for `questions`
    (questions it refuses before generating are skipped)."""
    from app.answer.types import AnswerRequest

    prompts = []
    for q in questions:
        plan = assistant.engine.plan(AnswerRequest.ask(q))
        if plan.prompt_ids:
            prompts.append(plan.prompt_ids)
    return {"model": assistant.llm.name, "check_ms": check_cost(assistant.llm, widths),
            "rounding": lead_shift(assistant.llm, prompts), "prompts": len(prompts)}


def format_lookup(result: dict) -> str:
    step = result["check_ms"].get(1)
    lines = [f"model {result['model']}: a check of W tokens, ms (W = 1: a one-token step)"]
    lines += [f"  W {w:>2}  {ms:8.1f} ms" + (f"  {ms / step:.2f}x" if step else "") for w, ms in result["check_ms"].items()]
    r = result["rounding"]
    if r["positions"]:
        lines.append(f"rounding over {r['positions']} positions of {result['prompts']} answers: the lead moves by median "
                     f"{r['shift_median']}, p99 {r['shift_p99']}, max {r['shift_max']} logits; a check picks "
                     f"another token at {r['other_pick']} of them")
    else:
        lines.append("rounding: no answer to measure (every question was refused before generating)")
    return "\n".join(lines)
