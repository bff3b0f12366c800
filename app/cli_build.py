"""`hexrag build llm|embedder|wrap-context` and `hexrag compile`: flags parsed into a typed plan,
then one library call (build_scripts.plan.build_model / compile_model, build_scripts.wrap_context)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from app.cli_common import friendly as _friendly


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not sizes:
        raise click.BadParameter("at least one size is needed")
    return sizes


@click.group()
def build() -> None:
    """Turn weights into a model directory (static ONNX graphs + tokenizer + manifest)."""


_target_option = click.option(
    "--target", "targets", multiple=True,
    help="HTP target(s) to compile for: sm8650, 8gen3, 57, ... (repeatable or comma-separated); cpu = none.")
_variant_option = click.option(
    "--variant", type=click.Choice(["sim", "shared", "both"]), default="both", show_default=True,
    help="sim: unshared binaries (x86 simulator and devices); shared: prefill+decode share weights (devices).")


class _Size(click.ParamType):
    name = "size"
    _UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}

    def convert(self, value, param, ctx):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmg]?b?)\s*", str(value).lower())
        if not m or float(m.group(1)) <= 0:
            self.fail(f"{value!r} is not a size such as 1.5GB, 800MB or 1500000000", param, ctx)
        return int(float(m.group(1)) * self._UNITS[m.group(2)])


_part_option = click.option(
    "--part-budget", type=_Size(), default=None,
    help="LLMs: weights per HTP context part, e.g. 1.5GB (the default); bigger models are split by layers.")


@click.command("compile")
@click.argument("model_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@_target_option
@_variant_option
@_part_option
@_friendly
def compile_cmd(model_dir: Path, targets: tuple[str, ...], variant: str, part_budget: int | None) -> None:
    """Compile a model directory's graphs into QNN HTP context binaries (no op left on the CPU)."""
    from build_scripts.plan import HtpBuild, compile_model

    htp = HtpBuild.of(targets, variant, part_budget)
    if htp is None:
        raise click.UsageError("give at least one --target")
    compile_model(model_dir, htp, _report)


def _report(line: str) -> None:
    click.echo(line, err=True)


_quant_option = click.option(
    "--quant", default="none", show_default=True,
    help="none (float; fp16 on HTP) | w8a16 | w4a16 | w4a16-mixed | w4a16-gguf | a JSON recipe file: PTQ for HTP with --calib text | "
         "int4 | int8: block-quantized graphs for the CPU backend (LLMs; GGUF blocks kept exactly; int4 reads "
         "Q4_K/Q5_K/Q6_K/Q4_1/Q8_0 with hexrag's own kernels where they are built) | int4-matmulnbits: int4 on ONNX "
         "Runtime's kernels only | int4-requant: ONNX Runtime GenAI's int4 layout, less accurate.")
_calib_options = [
    click.option("--calib", "calib", multiple=True, type=click.Path(path_type=Path),
                 help="Calibration text for w8a16/w4a16: files or directories (.md .txt .jsonl .json); "
                      "default the knowledge-base samples + chat prompts. Repeatable."),
    click.option("--calib-samples", type=int, default=64, show_default=True, help="Calibration texts to use."),
    # the check decodes every held-out text through both graphs on the CPU: about an hour for
    # SmolLM2-135M on 2 busy cores, so a build for a device can bound or skip it
    click.option("--eval-samples", type=click.IntRange(min=0), default=None,
                 help="Held-out texts for the accuracy check against the float graphs (default all; 0 skips it)."),
]


def _calib(f):
    for option in reversed(_calib_options):
        f = option(f)
    return f


def _build(weights: str, out: Path, shape, name: str | None, quant: str, calib: tuple[Path, ...], samples: int,
           eval_samples: int | None, targets: tuple[str, ...], variant: str, part_budget: int | None = None) -> None:
    """The flags as one BuildPlan, built in one call."""
    from pydantic import ValidationError

    from build_scripts.plan import BuildPlan, HtpBuild, build_model, parse_quant

    try:
        plan = BuildPlan(weights=str(weights), out=out, shape=shape, name=name,
                         quant=parse_quant(quant, calib, samples, eval_samples),
                         htp=HtpBuild.of(targets, variant, part_budget))
    except ValidationError as e:  # the plan's own consistency rules, said as a usage error
        raise click.UsageError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
    m = build_model(plan, _report)
    click.echo(f"built {m.name} ({m.quantization.recipe}): "
               f"{', '.join(dict.fromkeys(g.file for g in m.graphs))} in {out}")


@build.command("llm")
@click.option("--weights", required=True, help="GGUF file, Hugging Face directory, or a packaged model key.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option("--context", default=1024, show_default=True, help="KV cache slots (max prompt + answer tokens).")
@click.option("--prefill", default="128", show_default=True, help="Prefill bucket sizes, e.g. 128,32.")
@click.option("--name", help="Model name recorded in the manifest (default: the directory name).")
@_quant_option
@_calib
@_target_option
@_variant_option
@_part_option
@_friendly
def build_llm_cmd(weights: str, out: Path, context: int, prefill: str, name: str | None, quant: str,
                  calib: tuple[Path, ...], calib_samples: int, eval_samples: int | None, targets, variant,
                  part_budget) -> None:
    """Build a decoder LLM (llama / qwen2) into prefill + decode graphs."""
    from build_scripts.plan import LLMShape

    _build(weights, out, LLMShape(context=context, prefill=_sizes(prefill)), name, quant, calib, calib_samples,
           eval_samples, targets, variant, part_budget)


def _shape(value: str) -> tuple[int, int] | None:
    """`--query-shape`: "BxL" (e.g. 1x32) or "none"."""
    if value.strip().lower() in ("none", "0", ""):
        return None
    try:
        batch, seq = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"expected BxL such as 1x32, or none; got {value!r}",
                                 param_hint="--query-shape") from None
    return batch, seq


@build.command("embedder")
@click.option("--weights", required=True, help="Hugging Face BERT directory or a packaged model key.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option("--batch", default=8, show_default=True, help="Static batch size B.")
@click.option("--seq", default=128, show_default=True, help="Static sequence length L (tokens per text).")
@click.option("--query-shape", default="1x32", show_default=True,
              help="BxL of a second graph for short single queries (same weights; L capped at --seq); none: no bucket.")
@click.option("--name", help="Model name recorded in the manifest (default: the directory name).")
@click.option("--quant", default="none", show_default=True,
              help="none (float; fp16 on HTP) | w8a16 | w4a16 | a JSON recipe file (PTQ for HTP with --calib text).")
@_calib
@_target_option
@_variant_option
@_friendly
def build_embedder_cmd(weights: str, out: Path, batch: int, seq: int, query_shape: str, name: str | None,
                       quant: str, calib: tuple[Path, ...], calib_samples: int, eval_samples: int | None, targets,
                       variant) -> None:
    """Build a BERT sentence embedder into a [B, L] graph with pooling (+ a small query bucket)."""
    from build_scripts.plan import EmbedderShape

    _build(weights, out, EmbedderShape(batch=batch, seq=seq, query=_shape(query_shape)), name, quant, calib,
           calib_samples, eval_samples, targets, variant)


@build.command("wrap-context")
@click.option("--model", "model_dir", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="The model directory whose graphs the binaries were converted from (tokenizer, contract).")
@click.option("--binary", "binaries", multiple=True, required=True, type=click.Path(path_type=Path),
              help="A QNN context binary from qnn-context-binary-generator. Repeatable.")
@click.option("--json", "descriptions", multiple=True, required=True, type=click.Path(path_type=Path),
              help="Its qnn-context-binary-utility JSON, one per --binary, in the same order.")
@click.option("--target", required=True, help="The SoC the binaries were generated for: sm8750, 8elite, 69, ...")
@click.option("--graph", "graph_map", multiple=True, metavar="NAME=QNN_GRAPH",
              help="Which QNN graph stands for a model graph when the names differ. Repeatable.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@_friendly
def wrap_context_cmd(model_dir: Path, binaries: tuple[Path, ...], descriptions: tuple[Path, ...], target: str,
                     graph_map: tuple[str, ...], out: Path) -> None:
    """Wrap context binaries made with the QAIRT SDK into a model directory the runtime loads (HTP)."""
    from build_scripts.wrap_context import wrap_context

    if len(binaries) != len(descriptions):
        raise click.UsageError(f"give one --json per --binary ({len(binaries)} binaries, {len(descriptions)} JSON files)")
    bad = [g for g in graph_map if "=" not in g]
    if bad:
        raise click.UsageError(f"--graph takes NAME=QNN_GRAPH, got {bad[0]!r}")
    names = dict(g.split("=", 1) for g in graph_map)
    m = wrap_context(model_dir, list(zip(binaries, descriptions)), target, out, names)
    click.echo(f"wrapped {len(m.graphs)} graphs for {m.target.builds[0].target} ({m.target.builds[0].variant}) into {out}")


BUILD_COMMANDS = [build, compile_cmd]
