#!/usr/bin/env bash
# Predicted vs measured step time of examples:train with calibration by default (no
# table given): for the plain step and for a pass pipeline, a first run into a fresh cache
# (its prediction from micro-runs of the kernels; its steps 3-66 then go into the cache's
# ".steps.csv"), then a second run that predicts from the cache (the first run's step
# times). One markdown row each (for docs/passes.md; tools/docs_tables.sh --calibration
# writes them there). Usage:
#   examples/calibration_accuracy.sh TRAIN_BINARY OUT_DIR [train flags...]
# "Measured" is the mean wall time of steps 2-66 on rank 0; "predicted" the simulator on
# the compiled graph with the table the compile used. 66 steps: on 2 shared cores one
# step of the tiny model varies by +-30% around its mean, so a shorter run's mean (and
# the times a shorter run leaves in the cache) moves by more than the 10% in question.
set -euo pipefail
train=$1; out=$2; shift 2
mkdir -p "$out"
pipeline='bucket-collectives,schedule-overlap{prefetch=2}'
run() {  # run NAME CACHE_DIR [flags...]
  local name=$1 cache=$2; shift 2
  MAGI_CACHE_DIR="$cache" "$train" --steps=66 --checkpoint=false --out_dir="$out/$name" \
    --summary_json="$out/$name.json" "$@" > "$out/$name.log" 2>&1 ||
    { echo "$name failed:"; tail -5 "$out/$name.log"; return 1; }
  python3 - "$name" "$out/$name.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[2]))
measured, predicted = s["step_seconds"], s["predicted_step_seconds"]
parts = [("%d from earlier steps", s.get("calibrated_kernels_from_steps", 0)),
         ("%d micro-runs cached", s["calibrated_kernels_cached"]), ("%d measured", s["calibrated_kernels_measured"])]
calibration = ", ".join(text % n for text, n in parts if n) or "none"
print("| %s | %s | %s | %.1f ms | %.1f ms | %+.1f%% | %.3f MB | %.3f MB |" % (
    sys.argv[1], s["pipeline"] or "(none)", calibration, predicted * 1e3, measured * 1e3,
    100 * (predicted - measured) / measured, s["predicted_peak_memory_bytes"] / 1e6, s["peak_memory_bytes"] / 1e6))
PY
}
echo "| run | pipeline | calibration | step predicted | step measured | predicted vs measured | peak predicted | peak measured |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
rm -rf "$out/cache_plain" "$out/cache_pipeline"
run plain_first "$out/cache_plain" "$@"
run plain_cached "$out/cache_plain" "$@"
run pipeline_first "$out/cache_pipeline" --passes="$pipeline" "$@"
run pipeline_cached "$out/cache_pipeline" --passes="$pipeline" "$@"
