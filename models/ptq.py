"""What quantized a model directory's graphs, as its manifest records it: the PTQ record
(build_scripts/quantize writes it: recipe, weights, calibration, overrides, report), the CPU
target's block record (build_scripts/graph/blocks.py) and the quality measured against float.

The recipe's fields are defined here, once: build_scripts.quantize.recipes.Recipe adds the
behaviour a build needs, and the manifest records the Recipe it ran as this RecipeSpec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_RECORD = ConfigDict(extra="ignore")  # a record from an older build may carry fields since retired


class TensorOverride(BaseModel):
    """One recipe override as a recipe file gives it (recipes.py's module docstring)."""

    model_config = ConfigDict(extra="forbid")

    quant_type: str | None = None
    symmetric: bool | None = None
    rmin: float | None = None  # activations: a pinned range
    rmax: float | None = None
    per_channel: bool | None = None


class RecipeSpec(BaseModel):
    """What precision each kind of tensor gets (build_scripts/quantize/recipes.py has the built-ins)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    activations: str = "uint16"  # default activation type (asymmetric)
    linear_weights: str = "int8"  # MatMul weights: per-channel symmetric (or blocks, see block_size)
    block_size: int = 0  # > 0: block-wise linear weights (int4 or int8) along the input dimension
    lm_head: str = "int16"  # Gemm (LM head) weight
    lm_head_per_channel: bool = False  # True: per output row (symmetric); False: per tensor
    embedding: str = "int16"  # Gather table (token embeddings), per tensor
    norm_weights: str = "uint16"  # (RMS/Layer)Norm scale and bias, per-tensor asymmetric
    kv_cache: str = "uint16"  # past_*/new_* graph I/O, one scale per tensor shared by all graphs
    start_graph: bool = True  # LLMs: position 0 through its own quantized decode graph (massive activations)
    rounding: str = "gptq"  # linear weights: "gptq" (error-compensating, calibration Hessians) or "nearest"
    source_grid: bool = False  # int8 linear weights: a GGUF's own blocks where it has them (source_grid.py)
    activation_margin: float = 0.1  # every calibrated activation range widened by this fraction of its span per side
    kv_margin: float = 0.1  # KV range = calibrated range widened by this fraction of its span on each side
    overrides: dict[str, TensorOverride] = Field(default_factory=dict)  # tensor name or pattern -> override
    keep_float: tuple[str, ...] = ()  # node-name patterns left unquantized (fp16 on HTP)
    float_range: float = 0.0  # > 0: linear layers whose calibrated output reaches this magnitude stay float too
    description: str = ""


class WeightRecord(BaseModel):
    """How one weight was quantized."""

    model_config = _RECORD

    role: str  # linear | lm_head | embedding | norm | min term ...
    type: str  # a quant type (int8 ...) or "float"
    symmetric: bool | None = None
    granularity: str | None = None  # per-channel | per-tensor | block64 | "gguf Q4_1 block32" ...
    rounding: Literal["gptq", "source"] | None = None  # None: round to nearest


class PtqWeights(BaseModel):
    model_config = _RECORD

    file: str
    bytes: int
    float_bytes: int  # the float build's weights file
    tensors: dict[str, WeightRecord]
    blocked: dict[str, int] = Field(default_factory=dict)  # block-wise weights -> block size


class GptqSummary(BaseModel):
    model_config = _RECORD

    weights: int  # weights rounded by GPTQ
    skipped: list[str] = Field(default_factory=list)  # left to round-to-nearest
    seconds: float


class CalibrationRecord(BaseModel):
    """The text the activation ranges were calibrated on, and how."""

    model_config = _RECORD

    files: list[str] = Field(default_factory=list)  # given calibration files (none: the built-in text)
    samples: int  # texts used (every HOLDOUT_EVERY-th held out before)
    method: str = "MinMax"
    held_out_every: int
    capture_seconds: float
    gptq: GptqSummary | None = None
    # LLMs: sequences run through every graph
    sequences: int | None = None
    tokens: int | None = None
    sources: list[str] = Field(default_factory=list)
    runs: dict[str, int] = Field(default_factory=dict)  # graph -> runs
    decode_steps: int | None = None
    # embedders
    texts: int | None = None


class PtqRecord(BaseModel):
    """What post-training quantization did: one record per build, written once."""

    model_config = _RECORD

    recipe: RecipeSpec
    weights: PtqWeights
    calibration: CalibrationRecord
    overrides: dict[str, TensorOverride] = Field(default_factory=dict)  # tensor -> the override it took
    report: list[str] = Field(default_factory=list)  # report files beside the manifest
    quantize_seconds: dict[str, float] = Field(default_factory=dict)  # graph -> seconds
    seconds: float | None = None  # the whole quantization


class CpuBlocksRecord(BaseModel):
    """The CPU target's MatMulNBits weights (build_scripts/graph/blocks.py)."""

    model_config = _RECORD

    accuracy_level: int
    description: str
    weights: dict[str, int]  # where the blocks came from -> weights
    linear_bytes: int
    kquant_kernels: bool = False  # built with hexrag's K-quant kernels at hand (runtime/kquant)


class QualityMetrics(BaseModel):
    """A quantized build measured against its float build on held-out text (build_scripts/quantize/report.py)."""

    model_config = _RECORD

    # LLMs: teacher-forced logits and greedy tokens
    sequences: int | None = None
    steps: int | None = None
    scored_tokens: int | None = None
    logits_cosine: float | None = None
    logits_cosine_min: float | None = None
    prefill_logits_cosine: float | None = None
    greedy_agreement: float | None = None
    perplexity_float: float | None = None
    perplexity_quantized: float | None = None
    perplexity_change: float | None = None
    held_out_sources: list[str] | None = None
    # embedders
    texts: int | None = None
    embedding_cosine: float | None = None
    embedding_cosine_min: float | None = None
    embedding_norm_error_max: float | None = None


# keys a manifest of schema 1-2 kept flat in its `quantization` section
LEGACY_PTQ_KEYS = ("weights", "calibration", "overrides", "report", "quantize_seconds", "seconds")
LEGACY_BLOCK_KEYS = ("accuracy_level", "description", "weights", "linear_bytes")


def lift_flat_record(data: dict) -> dict:
    """A `quantization` section as schema 1-2 wrote it (the record's fields beside `recipe`, the
    recipe as `recipe_spec`, metrics a second time) in the typed shape: `ptq` or `blocks`."""
    if "ptq" in data or "blocks" in data:
        return data
    data = dict(data)
    data.pop("metrics", None)  # also in the manifest's `metrics` section, which stays
    data.pop("activations", None)  # the recipe's
    if "recipe_spec" in data:
        data["ptq"] = {"recipe": data.pop("recipe_spec"), **{k: data.pop(k) for k in LEGACY_PTQ_KEYS if k in data}}
    elif data.get("format") == "MatMulNBits" and "weights" in data:
        data["blocks"] = {k: data.pop(k) for k in LEGACY_BLOCK_KEYS if k in data}
    return data
