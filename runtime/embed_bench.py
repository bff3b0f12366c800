"""Time to embed one short question: the query bucket against the main graph, interleaved.

    python -m runtime.embed_bench --model models/all-minilm-l6-v2 [--runs 50] [--text "..."]

Each round embeds the question once through the runtime's own choice (the query bucket when the
model has one) and once on the main graph only, so a machine that gets busier or quieter affects
both alike; medians, min and max after a warm-up. The load average is printed with the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from runtime.embedder import Embedder, pick_graph
from runtime.options import RuntimeOptions

# 12 tokens with [CLS] and [SEP] in MiniLM's WordPiece: a spoken question's length
QUESTION = "How long does fast charging take at a station?"
WARMUP = 5


def time_embeds(emb: Embedder, text: str, runs: int) -> dict[str, list[float]]:
    """ms per call, `runs` interleaved rounds of (bucket, main graph) after a warm-up of each."""
    for _ in range(WARMUP):
        emb.embed([text])
        emb.embed([text], buckets=False)
    out: dict[str, list[float]] = {"bucket": [], "main": []}
    for _ in range(runs):
        for key, buckets in (("bucket", True), ("main", False)):
            start = time.perf_counter()
            emb.embed([text], buckets=buckets)
            out[key].append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="embedder model directory")
    parser.add_argument("--text", default=QUESTION)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    emb = Embedder(args.model, RuntimeOptions(threads=args.threads))
    ids, _ = emb.encode_ids([args.text])
    main_graph = emb.graphs[0]

    chosen = pick_graph(emb.graphs, 1, len(ids[0]))
    diff = float(np.abs(emb.embed([args.text]).vectors - emb.embed([args.text], buckets=False).vectors).max())
    load = os.getloadavg()
    times = time_embeds(emb, args.text, args.runs)
    load_after = os.getloadavg()
    print(f"{emb.manifest.name}: {len(ids[0])} tokens; main graph {main_graph.batch}x{main_graph.seq}, "
          f"runtime's choice {chosen.name} ({chosen.batch}x{chosen.seq}); max |difference| {diff:.2e}")
    for key, label in (("main", f"main graph {main_graph.batch}x{main_graph.seq}"),
                       ("bucket", f"runtime's choice ({chosen.name})")):
        t = times[key]
        print(f"  {label}: median {statistics.median(t):.2f} ms (min {min(t):.2f}, max {max(t):.2f}) over {len(t)}")
    print(f"  load average {load[0]:.2f} before, {load_after[0]:.2f} after")


if __name__ == "__main__":
    main()
