"""Where a decode step's time goes on the CPU backend (a measurement, not a test): ONNX Runtime's
profile of the last decode steps, summed by op type.

    python -m runtime.profile --model models/smollm2-135m-instruct [--prompt 128] [--steps 64]

On HTP, QNN profiles itself: run anything with HEXRAG_QNN_PROFILE=DIR (one CSV per graph), then

    python -m runtime.profile --qnn DIR/decode_ctx.csv

sums the NPU's own accelerator time per run and its cycles per node, layers folded together (on the
x86 simulator only the shares mean something).

The profiler times every node on its own, which roughly doubles a small node's cost: read the
shares, not the milliseconds. "outside nodes" is the run time no node accounts for (the
executor, I/O binding).
"""

from __future__ import annotations

import argparse
import gc
import json
import csv
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from runtime.options import RuntimeOptions


def summarize(profile: Path, last_runs: int) -> dict:
    """Per op type over the last `last_runs` runs of one session's profile: nodes, ms and share
    of a run. Node events belong to the run whose time span holds them."""
    events = json.loads(profile.read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[-last_runs:]
    if not runs:
        raise SystemExit(f"error: {profile} holds no runs")
    start = runs[0][0]
    ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # op -> [nodes, µs]
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < start:
            continue
        acc = ops[e["args"]["op_name"]]
        acc[0] += 1
        acc[1] += e["dur"]
    n = len(runs)
    run_ms = sum(b - a for a, b in runs) / n / 1000
    rows = sorted(((op, c / n, us / n / 1000) for op, (c, us) in ops.items()), key=lambda r: -r[2])
    rows.append(("outside nodes", 0, run_ms - sum(r[2] for r in rows)))
    return {"runs": n, "run_ms": run_ms,
            "ops": [{"op": op, "nodes": round(c), "ms": ms, "share": ms / run_ms} for op, c, ms in rows]}


_LAYER = re.compile(r"/layers\.\d+/")
_OP_ID = re.compile(r":OpId_\d+ \(cycles\)$|OpId_\d+ \(cycles\)$")


def summarize_qnn(path: Path) -> dict:
    """QNN's detailed profile (profiling_level=detailed): median accelerator and QNN execute time per
    run (µs), the one-off load and power-up times, and per node (layers folded) the cycles per run."""
    root: dict[str, list[float]] = defaultdict(list)
    nodes: dict[str, float] = defaultdict(float)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            what, value = row["Event Identifier"], float(row["Time"])
            if row["Event Level"] == "ROOT":
                root[what].append(value)
            elif row["Unit of Measurement"] == "CYCLES":
                nodes[_LAYER.sub("/layers.*/", _OP_ID.sub("", what)).strip() or what] += value
    runs = len(root.get("Accelerator (execute) time", []))
    if not runs:
        raise SystemExit(f"error: {path} holds no executed run (was it written with profiling_level=detailed?)")
    total = sum(nodes.values()) or 1.0
    return {"runs": runs,
            "accelerator_us": statistics.median(root["Accelerator (execute) time"]),
            "qnn_execute_us": statistics.median(root.get("QNN (execute) time", [0.0])),
            "load_binary_us": sum(root.get("QNN (load binary) time", [])),
            "power_up_us": statistics.median(root.get("Time for HVX + HMX power on and acquire", [0.0])),
            "nodes": [{"node": name, "cycles": c / runs, "share": c / total}
                      for name, c in sorted(nodes.items(), key=lambda kv: -kv[1])]}


def profile_decode(model: str, prompt: int, steps: int, threads: int | None = None) -> dict:
    """Prefill `prompt` tokens of the bench text, decode `steps` tokens with profiling on, and
    summarize the last half of the decode steps (well past the prefill)."""
    with tempfile.TemporaryDirectory(prefix="hexrag-profile-") as tmp:
        from runtime.bench import prompt_of
        from runtime.llm import LLM

        llm = LLM(model, RuntimeOptions(threads=threads, profile_dir=Path(tmp)))
        if prompt + steps > llm.context:
            raise SystemExit(f"error: prompt {prompt} + {steps} steps exceed the model's context {llm.context}")
        llm.stop_ids = set()
        llm.generate(prompt_of(llm, prompt), max_new_tokens=steps).run()
        del llm
        gc.collect()  # a session writes its profile when it is released
        # the decode session ran the most times (it is also the prefill one for one-graph builds)
        files = sorted(Path(tmp).glob("*.json"), key=lambda p: p.read_text().count('"model_run"'))
        if not files:
            raise SystemExit("error: no profile was written (the CPU backend profiles, HTP does not)")
        return summarize(files[-1], max(steps // 2, 1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--qnn", type=Path, help="a QNN profile CSV (HEXRAG_QNN_PROFILE) to summarize instead")
    ap.add_argument("--top", type=int, default=15, help="--qnn: nodes to list (default 15)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens before decoding (default 128)")
    ap.add_argument("--steps", type=int, default=64, help="decode steps (default 64; the last half are summed)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.qnn:
        q = summarize_qnn(args.qnn)
        print(f"{q['runs']} runs: accelerator {q['accelerator_us'] / 1000:.2f} ms, QNN execute "
              f"{q['qnn_execute_us'] / 1000:.2f} ms per run (medians); binary load {q['load_binary_us'] / 1000:.1f} ms, "
              f"HVX+HMX power-up {q['power_up_us'] / 1000:.1f} ms")
        print(f"{'node (layers folded)':<48} {'cycles/run':>12} {'share':>7}")
        for r in q["nodes"][:args.top]:
            print(f"{r['node'][:48]:<48} {r['cycles']:>12.0f} {r['share']:>7.1%}")
        return
    if not args.model:
        ap.error("--model (or --qnn) is required")
    if args.steps < 2:
        raise SystemExit("error: --steps must be at least 2")
    s = profile_decode(args.model, args.prompt, args.steps, args.threads)
    print(f"decode step {s['run_ms']:.2f} ms under the profiler (mean of the last {s['runs']} steps)")
    print(f"{'op type':<28} {'nodes':>6} {'ms/step':>8} {'share':>7}")
    for r in s["ops"]:
        print(f"{r['op']:<28} {r['nodes'] or '':>6} {r['ms']:>8.3f} {r['share']:>7.1%}")


if __name__ == "__main__":
    main()
