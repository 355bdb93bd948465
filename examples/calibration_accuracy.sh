#!/usr/bin/env bash
# Predicted vs measured step time of examples:train with calibration by default (no
# table given): for the plain step and for a pass pipeline, a first run into a fresh cache
# (its prediction from micro-runs of the kernels; its steps 3-66 then go into the cache's
# ".steps.csv"), then a second run that predicts from the cache (the first run's step
# times). Prints one markdown table of the four runs and keeps each run's summary
# (OUT_DIR/NAME.json: tools/docs_tables.sh --calibration renders docs/passes.md's tables from
# them). Usage:
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
}
rm -rf "$out/cache_plain" "$out/cache_pipeline"
run plain_first "$out/cache_plain" "$@"
run plain_cached "$out/cache_plain" "$@"
run pipeline_first "$out/cache_pipeline" --passes="$pipeline" "$@"
run pipeline_cached "$out/cache_pipeline" --passes="$pipeline" "$@"
# The table docs/passes.md shows (tools/doc_tables.py renders it there from the same summaries).
rows=()
for name in plain_first plain_cached pipeline_first pipeline_cached; do rows+=("--row=$name=$out/$name.json"); done
python3 "$(dirname "${BASH_SOURCE[0]}")/../tools/doc_tables.py" render summaries "${rows[@]}" \
  --columns=pipeline,calibration,step_predicted,step_measured,step_error,peak_predicted,peak_measured
