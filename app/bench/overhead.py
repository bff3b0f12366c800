"""Speed as ratios that hold on a busy machine: hexrag's engine against its own graphs run bare.

The reference is one ONNX Runtime session per graph fed zeros of the graph's declared inputs,
timed in the same process, interleaved with the engine, single-threaded (a neighbour on the
other core slows both alike). Ratio = engine tok/s ÷ bare-graph tok/s: what the host side (KV
cache handling, masks, rotary tables, sampling, detokenizing) costs. A regression there lowers
it whatever the machine's load; absolute tok/s would mostly measure the load.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from models.contract import is_inplace


def _bare_seconds(session, spec, steps: int) -> float:
    feeds = {t.name: np.zeros(t.shape, t.dtype) for t in spec.inputs}
    session.run(feeds)  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        session.run(feeds)
    return (time.perf_counter() - start) / steps  # a mean, like the engine's tok/s


def speed_ratios(model_dir: Path, steps: int = 48, repeats: int = 7) -> dict:
    from runtime.llm import LLM
    from runtime.options import RuntimeOptions
    from runtime.session import GraphSession

    llm = LLM(model_dir, RuntimeOptions(threads=1))
    llm.stop_ids = set()
    m = llm.decoder.manifest
    decode = m.graph("decode")
    prefill = max((g for g in m.graphs if g.kind == "prefill"), key=lambda g: g.seq)
    if is_inplace(decode.inputs):
        # CPU-target graphs write the cache in place through I/O binding: fed zeros by plain run they
        # would copy the whole cache every step, no fair reference for the engine's run
        return {"model": m.name, "skipped": "in-place KV graphs (CPU target): no fixed bare-graph reference"}
    bare = {g.name: GraphSession(model_dir / g.file, RuntimeOptions(threads=1), prepack=g.kind == "decode")
            for g in (decode, prefill)}
    prompt = [i % 64 + 3 for i in range(prefill.seq)]  # exactly one prefill chunk
    steps = min(steps, llm.context - prefill.seq - 1)
    llm.generate(prompt, max_new_tokens=4).run()  # warm-up
    runs = []
    for _ in range(repeats):  # engine and bare back to back: a load change hits both of a pair
        llm.decoder.reset()
        r = llm.generate(prompt, max_new_tokens=steps + 1).run()
        runs.append({"engine_decode": r.decode_tok_s, "engine_prefill": r.prefill_tok_s,
                     "bare_decode": 1 / _bare_seconds(bare[decode.name], decode, steps),
                     "bare_prefill": prefill.seq / _bare_seconds(bare[prefill.name], prefill, 16)})
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {"model": m.name, "threads": 1, "repeats": repeats, "decode_steps": steps, "prefill_tokens": prefill.seq,
            **{f"{k}_tok_s": round(v, 1) for k, v in med.items()},
            # the median of per-pair ratios, not a ratio of medians
            "decode_ratio": round(statistics.median(r["engine_decode"] / r["bare_decode"] for r in runs), 4),
            "prefill_ratio": round(statistics.median(r["engine_prefill"] / r["bare_prefill"] for r in runs), 4)}
