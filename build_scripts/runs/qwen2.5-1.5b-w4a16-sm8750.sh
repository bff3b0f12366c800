#!/usr/bin/env bash
# The 1.5B NPU build (the measured build of docs/benchmarks.md; a script, not part of CI):
#   Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M) -> float graphs -> w4a16 PTQ with the sample-KB
#   calibration text -> HTP context binaries for sm8750 (8 Elite, v79), shared weights (device build).
# Every stage's wall time and peak RSS (GNU time) go to $LOG/<stage>.time; the last stage prints
# the build metrics (ops on HTP, binary sizes, compile time). Float graphs already in $OUT.float
# are reused (delete them to rebuild). Usage:
#   build_scripts/runs/qwen2.5-1.5b-w4a16-sm8750.sh [OUT_DIR] [LOG_DIR]
# Environment: SAMPLES (calibration texts, default 32), CONTEXT (cache slots, default 1024),
# RECIPE (w4a16, the default, or w4a16-mixed / a recipe file). The weights (7.1 GB fp32 float
# graphs, 1.86 GB quantized) exceed the 1.5 GB part budget: the compile stage splits them in two.
set -euo pipefail
OUT=${1:-models/qwen2.5-1.5b-w4a16}
LOG=${2:-$OUT.logs}
SAMPLES=${SAMPLES:-32}
CONTEXT=${CONTEXT:-1024}
RECIPE=${RECIPE:-w4a16}
mkdir -p "$LOG"

stage() {  # stage NAME COMMAND...: run, timed, output to $LOG/NAME.log
  local name=$1; shift
  echo "== $name: $*" | tee -a "$LOG/stages.txt"
  /usr/bin/time -v -o "$LOG/$name.time" "$@" > "$LOG/$name.log" 2>&1
  grep -E "Elapsed \(wall|Maximum resident" "$LOG/$name.time" | tee -a "$LOG/stages.txt"
}

if [ -f "$OUT.float/manifest.json" ]; then  # float graphs from an earlier run: same weights, same shapes
  echo "== float: reusing $OUT.float" | tee -a "$LOG/stages.txt"
else
  stage float hexrag build llm --weights qwen2.5-coder-1.5b-instruct --out "$OUT.float" --context "$CONTEXT" --prefill 128
fi
stage quantize python -m build_scripts.quantize.evaluate --model "$OUT.float" --recipe "$RECIPE" --out "$OUT" \
  --samples "$SAMPLES" --eval-samples 8 --eval-tokens 64 --json
stage compile hexrag compile "$OUT" --target sm8750 --variant shared
stage metrics hexrag bench build --model "$OUT" --json
cat "$LOG/metrics.log"
