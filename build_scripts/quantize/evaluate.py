"""Measure quantization accuracy on a real model (a script, not a test).

    # quantize a float build into OUT (default: <model>-<recipe>) and report accuracy vs float
    python -m build_scripts.quantize.evaluate --model models/smollm2 --recipe w8a16

    # compare an existing quantized directory with its float build (no quantization)
    python -m build_scripts.quantize.evaluate --model models/smollm2 --quantized models/smollm2-w8a16

The held-out text is every 5th sample of the calibration sources (never used to calibrate).
Prints the summary, and with --json the full metrics as one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m build_scripts.quantize.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=Path, help="float model directory (hexrag build llm|embedder)")
    p.add_argument("--recipe", default="w8a16", help="w8a16 | w4a16 | recipe.json (default w8a16)")
    p.add_argument("--out", type=Path, help="where to write the quantized model (default <model>-<recipe>)")
    p.add_argument("--quantized", type=Path, help="compare this already quantized directory instead of quantizing")
    p.add_argument("--calib", action="append", help="calibration text file/dir (repeatable; default: knowledge samples)")
    p.add_argument("--samples", type=int, default=64, help="calibration samples (default 64)")
    p.add_argument("--eval-samples", type=int, default=None, help="held-out samples to evaluate (default all)")
    p.add_argument("--eval-tokens", type=int, default=None, help="continuation tokens per held-out sample")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    from build_scripts.errors import BuildError
    from build_scripts.quantize import format_summary, quantize_model_dir

    try:
        if args.quantized:
            metrics = compare_dirs(args.model, args.quantized, args.calib, args.eval_samples, args.eval_tokens)
            result = {"model_dir": str(args.quantized), "metrics": metrics}
            print(json.dumps(metrics, indent=1), file=sys.stderr)
        else:
            recipe_tag = Path(args.recipe).stem if args.recipe.endswith(".json") else args.recipe
            out = args.out or args.model.with_name(f"{args.model.name}-{recipe_tag}")
            result = quantize_model_dir(args.model, args.recipe, calib=args.calib, samples=args.samples, out=out,
                                        eval_samples=args.eval_samples, eval_tokens=args.eval_tokens)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    elif args.quantized is None:
        print(format_summary(result))
    return 0


def compare_dirs(float_dir: Path, quant_dir: Path, calib=None, eval_samples=None, eval_tokens=None) -> dict:
    """Held-out accuracy of `quant_dir` against `float_dir` (same tokenizer and graphs' contract)."""
    from build_scripts.quantize import calibration as cal
    from build_scripts.quantize.report import compare_embedders, compare_llms
    from models.manifest import load_manifest

    m = load_manifest(float_dir)
    _, held, _ = cal.calibration_texts(calib, None)
    held = cal.pick(held, eval_samples)
    start = time.perf_counter()
    if m.kind == "llm":
        from runtime.decoder import Decoder
        from runtime.llm import LLM

        llm = LLM(float_dir)
        seqs = cal.tokenize_samples(llm, held, llm.context, eval_tokens or llm.context, prompt_max=llm.context // 2)
        metrics = compare_llms(llm.decoder, Decoder(quant_dir), seqs, progress=True)
    else:
        from runtime.embedder import Embedder

        texts = [s.plain() for s in held]
        metrics = compare_embedders(Embedder(float_dir), Embedder(quant_dir), texts)
    metrics["seconds"] = round(time.perf_counter() - start, 1)
    return metrics


if __name__ == "__main__":
    sys.exit(main())
