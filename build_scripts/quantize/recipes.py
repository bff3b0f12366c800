"""Quantization recipes: what precision each kind of tensor gets, plus per-tensor overrides.

Built in:
  w8a16  symmetric int8 on every linear (MatMul) weight: a GGUF source's own blocks where it has
         them (bit-exact, source_grid.py), per channel otherwise; uint16 activations, uint16 KV
         cache I/O (the default for LLMs)
  w4a16  block-wise symmetric int4 on every linear weight (blocks of `block_size` along the input
         dimension: what QNN lowers to LPBQ with enable_block_quant_weight_optimization=1, so the
         block scales are made LPBQ-exact first: gptq.lpbq_scales); uint16 activations and KV
  w4a16-mixed  w4a16 with the value and down projections int8 per channel
  w4a16-gguf   w4a16 on a GGUF source's own 4-bit blocks (Q4_0/Q4_1/Q4_K codes as int4 with the
         file's float block scales, bit-exact; other weights as w4a16): compiled with float block
         scales, not LPBQ, which would re-round them
All keep the residual stream (the residual adds and the norms reading it) in float, fp16 on HTP
(FLOAT_RESIDUAL), and the linear layers whose outputs reach ±256 (FLOAT_RANGE).
All keep the token-embedding table and the LM head at 16 bits, per tensor (symmetric int16):
measured on SmolLM2-135M, a uint8 per-tensor embedding table alone (SNR 30 dB) flipped 11% of the
greedy tokens and a per-channel int8 LM head alone 4.5%, while int16 per tensor (SNR ~78 dB) is
lossless. With a tied embedding both uses get the same encoding, so the weights file stores the
table once: the same bytes as a uint8 table plus an int8 head (a QNN context binary holds it twice
either way, docs/benchmarks.md). (HTP takes an int16 symmetric Gemm weight, not
a uint16 one.) A recipe file can set `embedding: uint8`, `lm_head: int8` +
`lm_head_per_channel: true` to trade that accuracy for size on untied models.

A recipe file (JSON) starts from a built-in one and changes fields or adds per-tensor overrides:

    {
      "base": "w4a16",
      "block_size": 32,
      "overrides": {
        "layers.0.*.weight_t": {"quant_type": "int8"},         # first block's weights at 8 bits
        "layers.29.*.weight_t": {"quant_type": "int8"},        # ... and the last block's
        "/layers.*/attn/Softmax/output_0": {"quant_type": "uint16"}
      },
      "keep_float": ["/layers.1[1-9]/*/residual"]      # these nodes stay float (fp16 on HTP)
    }

Override keys are tensor names or fnmatch patterns (`*`, `?`, `[..]`), matched against the graph's
initializer names (weights: `layers.<i>.<q|k|v|o|gate|up|down>.weight_t`, `embed`, `lm_head`)
and activation names (`/layers.<i>/attn/.../output_0`). Values: `quant_type` (uint8, int8,
uint16, int16, int4, uint4), `symmetric`, `rmin`/`rmax` (activations), `per_channel` (weights;
default true for linear weights). A weight matched by an override is quantized per channel, not
in blocks. `block_size` also takes int8 linear weights (`{"base": "w8a16", "block_size": 32}`:
int8 blocks, each with its own scale, which HTP keeps as they are). `RECIPES[name].to_dict()`
shows every field of a built-in recipe.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

from build_scripts.errors import BuildError
from models.ptq import RecipeSpec

QUANT_TYPES = ("uint8", "int8", "uint16", "int16", "int4", "uint4")
BLOCK_TYPES = ("int4", "uint4", "int8")  # linear weight types that may be block-wise (LPBQ on HTP)
_OVERRIDE_KEYS = {"quant_type", "symmetric", "rmin", "rmax", "per_channel"}


class Recipe(RecipeSpec):
    """A recipe as a build runs it: the fields (models/ptq.py, where the manifest's record reads
    them too) and how they apply to a graph's tensors."""

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)

    def float_nodes(self, node_names) -> list[str]:
        """The nodes `keep_float` names (fnmatch patterns such as "/layers.*/*/residual")."""
        return [n for n in node_names if any(fnmatch.fnmatchcase(n, p) for p in self.keep_float)]

    def matching(self, tensor: str) -> dict[str, Any] | None:
        """The override for `tensor` (exact name first, then the first matching pattern)."""
        spec = self.overrides.get(tensor) or next(
            (o for pattern, o in self.overrides.items() if fnmatch.fnmatchcase(tensor, pattern)), None)
        return spec.model_dump(exclude_none=True) if spec is not None else None


# The residual stream in float (fp16 on HTP): SmolLM2's reaches ±1.5e4 on a few delimiter tokens
# from layer 11 on (massive activations), where a 16-bit grid's step is 0.46 against ordinary values
# of 1-10. Keeping the residual adds and the norms that read them float, SmolLM2-135M w8a16 went
# from 93.65% to 96.26% greedy agreement with float (perplexity +0.92% -> -0.22%, 1606 held-out
# tokens). A recipe file with "keep_float": [] makes every node integer again.
FLOAT_RESIDUAL = ("/layers.*/*/residual", "/layers.*/*/rms_norm", "/head/rms_norm")

# Linear layers whose outputs reach ±256 stay float (fp16 on HTP): the down projections that write
# the massive activations into the residual stream (SmolLM2: up to ±1.5e4 in layers 11, 28, 29),
# where a 16-bit grid steps by up to 0.5 against ordinary outputs of 0.1-10. On SmolLM2 w8a16 the
# 8 such down projections of 30 in float lifted greedy agreement 98.2% -> 99.0% (logits cosine
# 0.99964 -> 0.99987) for 26 MB more weights (docs/benchmarks.md).
FLOAT_RANGE = 256.0

RECIPES: dict[str, Recipe] = {
    # int8 linear weights on the GGUF's own blocks where the source has them (Q4_0/Q4_1/Q4_K/Q8_0/
    # Q6_K: bit-exact, plus a float min term for Q4_1/Q4_K), per channel (GPTQ) otherwise. On
    # SmolLM2-135M (Q4_1), with FLOAT_RANGE, greedy agreement 96.3% (per-channel int8) -> 99.0%
    "w8a16": Recipe(name="w8a16", keep_float=FLOAT_RESIDUAL, float_range=FLOAT_RANGE, source_grid=True,
                    description="int8 linear weights (the GGUF's own blocks exactly, else per channel), "
                                "int16 embedding/LM head, uint16 activations with the residual stream in "
                                "fp16, uint16 KV I/O"),
    "w4a16": Recipe(name="w4a16", linear_weights="int4", block_size=64, keep_float=FLOAT_RESIDUAL,
                    float_range=FLOAT_RANGE,
                    description="block-wise int4 linear weights (LPBQ on HTP), int16 embedding/LM head, "
                                "uint16 activations with the residual stream in fp16, uint16 KV I/O"),
    # w4a16 with the value and down projections at 8 bits, as llama.cpp's Q4_K_M keeps attn_v and
    # ffn_down at 6: on SmolLM2-135M greedy agreement 75.6% -> 86.2% and perplexity +27% -> +7.0%
    # for 142 -> 152 MB of weights (docs/benchmarks.md)
    "w4a16-mixed": Recipe(name="w4a16-mixed", linear_weights="int4", block_size=64, keep_float=FLOAT_RESIDUAL,
                          float_range=FLOAT_RANGE,
                          overrides={"layers.*.v.weight_t": {"quant_type": "int8"},
                                     "layers.*.down.weight_t": {"quant_type": "int8"}},
                          description="w4a16 with the value and down projections int8 per channel"),
    # int4 linear weights on the GGUF's own 4-bit blocks: the same weights as w8a16's source grid in
    # half the bits, so on SmolLM2-135M (Q4_1) the same 99.0% greedy agreement (w4a16: 75.6%) for
    # 161 MB (w4a16: 142 MB; the float block scales and mins cost 2 bits per weight). HTP runs float
    # block scales instead of LPBQ's 4-bit ones (slower: docs/benchmarks.md)
    "w4a16-gguf": Recipe(name="w4a16-gguf", linear_weights="int4", block_size=64, keep_float=FLOAT_RESIDUAL,
                         float_range=FLOAT_RANGE, source_grid=True,
                         description="int4 linear weights on the GGUF's own 4-bit blocks exactly (float block "
                                     "scales on HTP), else as w4a16"),
}


def for_targets(recipe: Recipe, htp_archs) -> Recipe:
    """The recipe adjusted to the HTP generations it will be compiled for. v68 (SA8295P, SM8350)
    refuses a 16-bit Gemm weight, so there the LM head goes int8 per output channel (measured on
    SmolLM2: 4.5% of greedy tokens flip against the int16 head; see the module docstring), and the
    linear weights off the source grid: v68 takes int4 block weights (w4a16 compiles fully for
    SA8295P) but not a source grid's int8 blocks ("Failed to add BQ MatMul node" for every linear
    weight), so w8a16 goes per channel; w4a16-gguf becomes w4a16 (its float-scale int4 blocks are
    not measured on v68)."""
    if (recipe.lm_head == "int16" or recipe.source_grid) and any(arch < 69 for arch in htp_archs):
        return recipe.model_copy(update={"name": f"{recipe.name}+v68", "lm_head": "int8",
                                         "lm_head_per_channel": True, "source_grid": False})
    return recipe


def _check_type(value: Any, where: str) -> str:
    if value not in QUANT_TYPES:
        raise BuildError(f"{where}: quant_type {value!r} is not one of {', '.join(QUANT_TYPES)}")
    return value


def _check_overrides(overrides: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(overrides, dict):
        raise BuildError(f"{where}: 'overrides' must be an object of tensor name/pattern -> settings")
    out = {}
    for key, spec in overrides.items():
        if not isinstance(spec, dict):
            raise BuildError(f"{where}: override {key!r} must be an object")
        unknown = set(spec) - _OVERRIDE_KEYS
        if unknown:
            raise BuildError(f"{where}: override {key!r} has unknown setting(s) {', '.join(sorted(unknown))} "
                             f"(allowed: {', '.join(sorted(_OVERRIDE_KEYS))})")
        if "quant_type" in spec:
            _check_type(spec["quant_type"], f"{where}: override {key!r}")
        if ("rmin" in spec) != ("rmax" in spec):
            raise BuildError(f"{where}: override {key!r} needs both rmin and rmax")
        out[str(key)] = dict(spec)
    return out


def resolve_recipe(recipe: str | Path | Recipe | dict) -> Recipe:
    """A Recipe from a built-in name, a JSON recipe file, a dict in the file's format, or a Recipe."""
    if isinstance(recipe, Recipe):
        return recipe
    where = "recipe"
    if isinstance(recipe, (str, Path)):
        if str(recipe) in RECIPES:
            return RECIPES[str(recipe)]
        path = Path(recipe)
        if not path.is_file():
            raise BuildError(f"unknown quantization recipe {str(recipe)!r}: choose from {', '.join(RECIPES)} "
                             f"or give a JSON recipe file")
        where = str(path)
        try:
            recipe = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise BuildError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(recipe, dict):
        raise BuildError(f"{where}: a recipe must be a JSON object")
    spec = dict(recipe)
    base_name = spec.pop("base", "w8a16")
    if base_name not in RECIPES:
        raise BuildError(f"{where}: unknown base recipe {base_name!r} (choose from {', '.join(RECIPES)})")
    base = RECIPES[base_name]
    fields = set(Recipe.model_fields)
    unknown = set(spec) - fields
    if unknown:
        raise BuildError(f"{where}: unknown recipe field(s) {', '.join(sorted(unknown))} "
                         f"(allowed: base, {', '.join(sorted(fields))})")
    for key in ("activations", "linear_weights", "lm_head", "embedding", "norm_weights", "kv_cache"):
        if key in spec:
            _check_type(spec[key], f"{where}: {key}")
    if spec.get("rounding", base.rounding) not in ("gptq", "nearest"):
        raise BuildError(f"{where}: rounding must be 'gptq' or 'nearest'")
    if spec.get("kv_cache", "uint16") != "uint16":
        raise BuildError(f"{where}: only a uint16 KV cache is supported")
    if "keep_float" in spec:
        patterns = spec["keep_float"]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise BuildError(f"{where}: keep_float must be a list of node-name patterns")
        spec["keep_float"] = tuple(patterns)
    reach = spec.get("float_range", 0)
    if isinstance(reach, bool) or not isinstance(reach, (int, float)) or reach < 0:
        raise BuildError(f"{where}: float_range must be a number >= 0 (0: off)")
    if "overrides" in spec:
        spec["overrides"] = {**base.overrides, **_check_overrides(spec["overrides"], where)}
    block = int(spec.get("block_size", base.block_size))
    weights = spec.get("linear_weights", base.linear_weights)
    if block and weights not in BLOCK_TYPES:
        raise BuildError(f"{where}: block_size needs int4 or int8 linear weights (got {weights}); "
                         f"use 0 for per-channel")
    if block and block % 8:
        raise BuildError(f"{where}: block_size must be a multiple of 8 (HTP), got {block}")
    name = spec.pop("name", None) or (f"{base_name}+custom" if spec else base_name)
    return Recipe.model_validate({**base.model_dump(), **spec, "name": name})

