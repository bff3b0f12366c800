"""In-process A/B of decode speed (not a test): builds and CPU spin settings side by side.

    python -m runtime.ab --model /tmp/smollm2-int4 --spin-us 0,20            # one build, two spins
    python -m runtime.ab --model /tmp/exp/qwen4n,/tmp/exp/qrq --rounds 6     # two builds

Every combination of --model and --spin-us is loaded once into this process, then the rounds run
them in turn (A B A B ...) on the same prompt, so a drift in the machine's speed, which separate
processes measured minutes apart would read as a difference, falls on all of them alike. Prints
decode tok/s per combination: median (min–max) over the rounds.
"""

from __future__ import annotations

import argparse
import statistics

from models.manifest import ManifestError
from runtime.bench import prompt_of
from runtime.errors import RuntimeModelError
from runtime.options import MAX_SPIN_US, SPIN_US, RuntimeOptions


def run_ab(models: list[str], spins: list[int], prompt: int, gen: int, rounds: int,
           threads: int | None = None) -> dict[tuple[str, int], list[float]]:
    """(model, spin µs) -> decode tok/s of each round."""
    from runtime.llm import LLM

    llms = {(m, s): LLM(m, RuntimeOptions(threads=threads, spin_us=s)) for m in models for s in spins}
    for llm in llms.values():
        llm.stop_ids = set()  # exactly `gen` tokens
        if prompt + gen > llm.context:
            raise RuntimeModelError(f"prompt {prompt} + {gen} tokens exceed {llm.name}'s context {llm.context}")
    speeds: dict[tuple[str, int], list[float]] = {key: [] for key in llms}
    for _ in range(rounds):
        for key, llm in llms.items():
            llm.decoder.reset()
            speeds[key].append(llm.generate(prompt_of(llm, prompt), max_new_tokens=gen).run().decode_tok_s)
    return speeds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directories, comma-separated")
    ap.add_argument("--spin-us", default=str(SPIN_US), help="spin settings, comma-separated (0: never)")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        spins = [int(s) for s in args.spin_us.split(",")]
    except ValueError:
        spins = [-1]
    if not all(0 <= s <= MAX_SPIN_US for s in spins):
        raise SystemExit(f"error: --spin-us takes microseconds from 0 to {MAX_SPIN_US}, comma-separated (got {args.spin_us!r})")
    try:
        speeds = run_ab(args.model.split(","), spins, args.prompt, args.gen, args.rounds, args.threads)
    except (ManifestError, RuntimeModelError) as e:  # a directory that is no build, a prompt too long
        raise SystemExit(f"error: {e}") from None
    print(f"decode tok/s, {args.prompt}-token prompt, {args.gen} tokens, {args.rounds} interleaved rounds")
    for (model, spin), v in speeds.items():
        print(f"{model}  spin {spin} us: {statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})")


if __name__ == "__main__":
    main()
