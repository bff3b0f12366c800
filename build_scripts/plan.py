"""One build as a typed plan: weights → graphs → PTQ → HTP context binaries, one call.

    plan = BuildPlan(weights="smollm2-135m-instruct", out=Path("models/smol"), shape=LLMShape(context=1024),
                     quant=HtpPtq(recipe="w8a16"), htp=HtpBuild(targets=["sm8650"]))
    manifest = build_model(plan)

`hexrag build llm|embedder` parses its flags into a BuildPlan (`parse_quant`, `HtpBuild.of`) and
makes this one call; quickstart and the quick gate do the same. Each step keeps its own library
call (build.build_llm / build_embedder, quantize.quantize_model_dir, compile.compile_model_dir)
for the tests that exercise one step alone; here the steps pass one Manifest on in memory and the
directory is hashed and its manifest written once, at the end (models.manifest.seal).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from build_scripts.build import QUERY_SHAPE, write_embedder, write_llm
from build_scripts.graph.blocks import CPU_RECIPES
from build_scripts.staging import staged_directory
from models.manifest import Manifest, load_manifest, seal


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FloatGraphs(_Plan):
    """No quantization: float32 graphs (the CPU runs them as they are; HTP compiles them to fp16)."""

    kind: Literal["float"] = "float"


class CpuBlocks(_Plan):
    """Block-quantized graphs for the CPU backend (KQuantMatMul / MatMulNBits), made while the graphs
    are built (LLMs; a GGUF's blocks are kept exactly)."""

    kind: Literal["cpu-blocks"] = "cpu-blocks"
    recipe: Literal[tuple(CPU_RECIPES)]  # a name of graph/blocks.CPU_RECIPES


class HtpPtq(_Plan):
    """Post-training quantization of the float graphs for HTP: a recipe (a built-in name or a JSON
    file), calibrated on real text, checked against the float graphs on held-out text."""

    kind: Literal["htp-ptq"] = "htp-ptq"
    recipe: str
    calib: tuple[Path, ...] = ()  # files or directories; empty: the KB samples + chat prompts
    samples: int = 64
    eval_samples: int | None = None  # None: every held-out text; 0: no check


Quantization = Annotated[Union[FloatGraphs, CpuBlocks, HtpPtq], Field(discriminator="kind")]


def parse_quant(value: str, calib: tuple[Path, ...] = (), samples: int = 64,
                eval_samples: int | None = None) -> Quantization:
    """The CLI's one `--quant` word as the mechanism it names."""
    if value == "none":
        return FloatGraphs()
    if value in CPU_RECIPES:
        return CpuBlocks(recipe=value)
    return HtpPtq(recipe=value, calib=tuple(calib), samples=samples, eval_samples=eval_samples)


class LLMShape(_Plan):
    kind: Literal["llm"] = "llm"
    context: int = 1024  # KV cache slots: the longest prompt + answer
    prefill: tuple[int, ...] = (128,)  # prefill bucket sizes


class EmbedderShape(_Plan):
    kind: Literal["embedder"] = "embedder"
    batch: int = 8
    seq: int = 128
    query: tuple[int, int] | None = QUERY_SHAPE  # a second graph for one short query; None: not built


VARIANTS = {"sim": (False,), "shared": (True,), "both": (False, True)}


class HtpBuild(_Plan):
    """What to compile for: HTP targets (SoC names, aliases or arch numbers) and which binaries:
    unshared (the x86 simulator and devices) and/or prefill+decode sharing weights (devices)."""

    targets: tuple[str, ...]
    variant: Literal["sim", "shared", "both"] = "both"
    part_budget: int | None = None  # LLM weights per context part; None: the default

    @classmethod
    def of(cls, targets: tuple[str, ...], variant: str = "both", part_budget: int | None = None) -> HtpBuild | None:
        """--target values (repeatable, comma-separated); `cpu` names no compilation."""
        names = tuple(t.strip() for spec in targets for t in spec.split(",") if t.strip() and t.strip() != "cpu")
        return cls(targets=names, variant=variant, part_budget=part_budget) if names else None


class BuildPlan(_Plan):
    weights: str  # a GGUF file, a Hugging Face directory, or a packaged model key
    out: Path
    shape: Annotated[Union[LLMShape, EmbedderShape], Field(discriminator="kind")]
    quant: Quantization = FloatGraphs()
    htp: HtpBuild | None = None
    name: str | None = None  # recorded in the manifest; default the directory's name
    progress: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> BuildPlan:
        if isinstance(self.quant, CpuBlocks):
            if isinstance(self.shape, EmbedderShape):
                raise ValueError(f"--quant {self.quant.recipe} is for LLMs; an embedder takes none, w8a16, "
                                 "w4a16 or a recipe file")
            if self.htp is not None:
                raise ValueError(f"--quant {self.quant.recipe} builds MatMulNBits graphs for the CPU backend; HTP "
                                 f"targets ({', '.join(sorted(self.htp.targets))}) need --quant w8a16, w4a16 or none")
        return self


def build_model(plan: BuildPlan, report: Callable[[str], None] = lambda line: None) -> Manifest:
    """Build `plan.out` whole: graphs, then PTQ (the float build lives in a scratch directory beside
    it), then HTP compilation. The steps hand one Manifest on in memory; the directory is hashed
    and the manifest written once, at the end, and the whole directory replaces `out` only then
    (a failure leaves `out` as it was). `report` gets a line per compiled target and variant, and
    any change the targets made to the recipe."""
    recipe = _recipe(plan, report)  # a bad recipe or target fails before the build, not after
    with staged_directory(plan.out) as tmp:
        if recipe is None:
            manifest = _graphs(plan, tmp)
        else:
            from build_scripts.quantize import format_summary, quantize_into

            q = plan.quant
            with tempfile.TemporaryDirectory(prefix=f".{plan.out.name}.float.", dir=plan.out.parent) as scratch:
                float_dir = Path(scratch)
                manifest, result = quantize_into(float_dir, _graphs(plan, float_dir), tmp, recipe,
                                                 calib=list(q.calib) or None, samples=q.samples,
                                                 evaluate=q.eval_samples != 0, eval_samples=q.eval_samples,
                                                 progress=plan.progress)
            if plan.progress:
                print(format_summary({**result, "model_dir": str(plan.out)}), file=sys.stderr)
        if plan.htp is not None:
            manifest = _compile(tmp, manifest, plan.htp, plan.out.name, report)
        return seal(tmp, manifest)


def compile_model(model_dir: Path, htp: HtpBuild, report: Callable[[str], None] = lambda line: None) -> Manifest:
    """Compile a built model for HTP targets and record the builds in its manifest (written once)."""
    manifest = load_manifest(model_dir, verify=False)
    recorded = manifest.target
    try:
        return seal(model_dir, _compile(model_dir, manifest, htp, model_dir.name, report))
    except BaseException:
        if manifest.target is not recorded:  # a variant compiled before the failure: its files are here, listed
            seal(model_dir, manifest)
        raise


def _compile(model_dir: Path, manifest: Manifest, htp: HtpBuild, name: str, report: Callable[[str], None]) -> Manifest:
    """Each variant's builds recorded in `manifest.target` (in memory; the caller writes it)."""
    from build_scripts.compile import compile_model_dir

    for shared in VARIANTS[htp.variant]:
        manifest.target = compile_model_dir(model_dir, list(htp.targets), shared=shared, part_budget=htp.part_budget,
                                            manifest=manifest)
        report(f"compiled {name} for {', '.join(htp.targets)} ({'shared' if shared else 'sim'})")
    return manifest


def _graphs(plan: BuildPlan, out: Path) -> Manifest:
    name = plan.name or plan.out.name
    if isinstance(plan.shape, LLMShape):
        quant = plan.quant.recipe if isinstance(plan.quant, CpuBlocks) else "none"
        return write_llm(plan.weights, out, context=plan.shape.context, prefill=plan.shape.prefill, name=name,
                         progress=plan.progress, quant=quant)
    return write_embedder(plan.weights, out, batch=plan.shape.batch, seq=plan.shape.seq, name=name,
                          query=plan.shape.query)


def _recipe(plan: BuildPlan, report: Callable[[str], None]):
    """The PTQ recipe adjusted to the HTP targets, or None when the plan has no PTQ step."""
    if not isinstance(plan.quant, HtpPtq):
        return None
    from runtime.qnn_targets import resolve_target
    from build_scripts.quantize import for_targets, resolve_recipe

    requested = resolve_recipe(plan.quant.recipe)
    targets = plan.htp.targets if plan.htp is not None else ()
    recipe = for_targets(requested, [resolve_target(t).htp_arch for t in targets])
    if recipe is not requested:
        blocks = ("" if not requested.source_grid else
                  " and the linear weights per channel (v68 takes no int8 block weights)"
                  if requested.linear_weights == "int8"
                  else " and the linear weights on w4a16's blocks, not the GGUF's own (not measured on v68)")
        report(f"v68 target: the LM head is quantized int8 per channel (v68 has no 16-bit Gemm weights){blocks}")
    return recipe

