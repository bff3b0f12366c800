"""Post-training quantization of a model directory's graphs for QNN HTP (QDQ, real calibration text).

    from build_scripts.quantize import quantize_model_dir
    quantize_model_dir("models/smollm2", recipe="w8a16")              # in place
    quantize_model_dir("models/smollm2", "w4a16", out="models/smollm2-w4")

Modules: calibration (text -> captured float-graph feeds), recipes (w8a16, w4a16, recipe files),
qdq (prepare / quantize / LPBQ blocks / uint16 KV I/O / shared weights file), report (accuracy vs
float, activation ranges), pipeline (the whole chain), evaluate (command line measurement).
"""

from build_scripts.quantize.pipeline import format_summary, quantize_into, quantize_model_dir
from build_scripts.quantize.recipes import RECIPES, Recipe, for_targets, resolve_recipe

__all__ = ["quantize_model_dir", "quantize_into", "format_summary", "RECIPES", "Recipe", "for_targets",
           "resolve_recipe"]
