"""Runtime benchmark (not a test): TTFT, prefill and decode speed, peak RSS, and prefix reuse.

    python -m runtime.bench --model models/smollm2-135m-instruct [--lengths 32,128,512] [--gen 128]
    python -m runtime.bench --model M --beside-fill 15   # first tokens while passage rows are computed

Each configuration runs --runs times; medians are printed. Prompts are real text cut to N tokens,
generation is greedy with end-of-turn tokens ignored so every run produces exactly --gen tokens.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the peers' benchmark processes import this module: keep it light
    from runtime.llm import LLM

# real in-car text; app.bench tokenizes the same text with each peer's own tokenizer
BENCH_TEXT = (
    "The tyre pressure monitoring system warns you when one or more tyres are significantly under-inflated. "
    "Check the pressures when the tyres are cold, using the values on the label in the driver's door frame. "
    "Charging at a DC fast charger takes the battery from ten to eighty percent in about thirty minutes. "
    "Adaptive cruise control keeps a set distance to the vehicle ahead and can bring the car to a stop. "
)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def repeat_to(ids: list[int], n: int) -> list[int]:
    """`ids` repeated and cut to exactly n tokens."""
    return (ids * (n // max(len(ids), 1) + 1))[:n]


def prompt_of(llm: LLM, n: int) -> list[int]:
    return repeat_to(llm.encode(BENCH_TEXT), n)


def run_lengths(llm: LLM, lengths: list[int], gen: int, runs: int) -> list[dict]:
    rows = []
    for n in lengths:
        samples = []
        for _ in range(runs):
            llm.decoder.reset()  # cold cache: measure the full prefill
            samples.append(llm.generate(prompt_of(llm, n), max_new_tokens=gen).run())
        rows.append({
            "prompt": n,
            "ttft_ms": statistics.median(r.ttft_s for r in samples) * 1000,
            "prefill_tok_s": statistics.median(r.prefill_tok_s for r in samples),
            "decode_tok_s": statistics.median(r.decode_tok_s for r in samples),
            "generated": samples[0].completion_tokens,
        })
    return rows


def run_prefix_reuse(llm: LLM, runs: int) -> dict:
    """Second chat turn: same system prompt + history, cold cache vs the cache left by turn one."""
    system = {"role": "system", "content": BENCH_TEXT * 2}
    turn1 = [system, {"role": "user", "content": "How do I check my tyre pressure?"}]
    cold, warm = [], []
    for _ in range(runs):
        llm.decoder.reset()
        first = llm.generate(llm.encode_chat(turn1), max_new_tokens=24).run()
        turn2 = llm.encode_chat(turn1 + [{"role": "assistant", "content": first.text},
                                         {"role": "user", "content": "And how long does fast charging take?"}])
        warm.append(llm.generate(turn2, max_new_tokens=1).run())
        llm.decoder.reset()
        cold.append(llm.generate(turn2, max_new_tokens=1).run())
    cold_ms = statistics.median(r.ttft_s for r in cold) * 1000
    warm_ms = statistics.median(r.ttft_s for r in warm) * 1000
    return {"prompt": cold[0].prompt_tokens, "reused": warm[0].cached_tokens, "cold_ms": cold_ms,
            "warm_ms": warm_ms, "speedup": cold_ms / warm_ms}


def spread(times: list[float]) -> dict[str, float]:
    """The median, the 90th percentile (nearest rank: a time some run took) and the worst."""
    ranked = sorted(times)
    p90 = ranked[max(0, -(-len(ranked) * 9 // 10) - 1)]
    return {"median": round(statistics.median(ranked), 1), "p90": round(p90, 1), "max": round(ranked[-1], 1)}


FILL_PREFIX, FILL_PASSAGE, FILL_QUESTION = 130, 110, 150  # tokens: instructions, a passage, a question


def run_beside_fill(llm: LLM, questions: int, mode: str) -> list[float]:
    """First-token times (ms) of `questions` prompts (a kept prefix and 150 tokens), 0.3-1.2 s apart,
    while a thread computes passages' rows after that prefix without pause (the server's fill at its
    busiest). mode "quiet": no fill; "wait": the fill's steps run to their end (hexrag before
    2026-12-05); "interrupt": a question stops the step in progress (LLM.kv_rows(background=True))."""
    from runtime.errors import Interrupted

    text = prompt_of(llm, FILL_PREFIX + FILL_QUESTION + FILL_PASSAGE)
    prefix, question = text[:FILL_PREFIX], text[:FILL_PREFIX + FILL_QUESTION]
    pick = random.Random(1)
    llm.decoder.reset()
    llm.kv_rows([], prefix)
    stop, asking = threading.Event(), threading.Event()

    def fill():
        while not stop.is_set():
            start = pick.randrange(FILL_PREFIX)  # another passage each time
            try:
                llm.kv_rows(prefix, text[start:start + FILL_PASSAGE], background=mode == "interrupt")
            except Interrupted:
                while asking.is_set() and not stop.is_set():
                    time.sleep(0.01)

    filler = threading.Thread(target=fill) if mode != "quiet" else None
    if filler:
        filler.start()
    waits = []
    try:
        for _ in range(questions):
            time.sleep(pick.uniform(0.3, 1.2))
            if filler is None:
                llm.decoder.rewind(len(prefix))  # where a fill leaves the cache
            asking.set()
            started = time.perf_counter()
            steps = iter(llm.generate(question, max_new_tokens=2))
            next(steps, None)
            waits.append((time.perf_counter() - started) * 1000)
            for _ in steps:  # the rest, then the model is free
                pass
            asking.clear()
    finally:
        stop.set()
        if filler:
            filler.join()
    return waits


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", default="32,128,512")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--beside-fill", type=int, default=0, metavar="N",
                    help="only: N questions' first tokens with no fill, a fill they wait for, one they interrupt")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    from runtime.llm import LLM
    from runtime.options import RuntimeOptions

    llm = LLM(args.model, RuntimeOptions(backend=args.backend, threads=args.threads))
    load_s = time.perf_counter() - t0
    llm.stop_ids = set()  # exactly --gen tokens per run
    if args.beside_fill:
        print(f"model {llm.name}: first token of {args.beside_fill} questions ({FILL_QUESTION} tokens after a kept "
              f"{FILL_PREFIX}), ms, beside a fill of {FILL_PASSAGE}-token passages")
        for mode in ("quiet", "wait", "interrupt"):
            waits = spread(run_beside_fill(llm, args.beside_fill, mode))
            print(f"  {mode:>9}: median {waits['median']:.0f}  p90 {waits['p90']:.0f}  max {waits['max']:.0f}")
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    if max(lengths) + args.gen > llm.context:
        raise SystemExit(f"error: prompt {max(lengths)} + {args.gen} tokens exceed the model's context {llm.context}")
    rows = run_lengths(llm, lengths, args.gen, args.runs)
    reuse = run_prefix_reuse(llm, args.runs)

    print(f"model {llm.name}  backend {args.backend}  threads {args.threads or 'all'}  load {load_s:.2f} s  "
          f"runs {args.runs} (medians)")
    print(f"{'prompt':>7} {'TTFT ms':>9} {'prefill tok/s':>14} {'decode tok/s':>13} {'generated':>10}")
    for r in rows:
        print(f"{r['prompt']:>7} {r['ttft_ms']:>9.0f} {r['prefill_tok_s']:>14.1f} {r['decode_tok_s']:>13.1f} "
              f"{r['generated']:>10}")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    print(f"prefix reuse, 2nd chat turn of {reuse['prompt']} tokens ({reuse['reused']} cached): "
          f"TTFT cold {reuse['cold_ms']:.0f} ms vs warm {reuse['warm_ms']:.0f} ms = {reuse['speedup']:.1f}x faster")


if __name__ == "__main__":
    main()
