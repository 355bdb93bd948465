#!/usr/bin/env bash
# Predicted vs measured step time of examples:train with calibration by default (no
# table given): for the plain step and for a pass pipeline, a first run that measures the
# kernels into a fresh cache, then a second run that reuses the cache. One markdown row
# each (for docs/passes.md; tools/docs_tables.sh --calibration writes them there). Usage:
#   examples/calibration_accuracy.sh TRAIN_BINARY OUT_DIR [train flags...]
# "Measured" is the mean wall time of steps 2-30 on rank 0; "predicted" the simulator on
# the compiled graph with the table the compile used.
set -euo pipefail
train=$1; out=$2; shift 2
mkdir -p "$out"
pipeline='bucket-collectives,schedule-overlap{prefetch=2}'
run() {  # run NAME CACHE_DIR [flags...]
  local name=$1 cache=$2; shift 2
  MAGI_CACHE_DIR="$cache" "$train" --steps=30 --checkpoint=false --out_dir="$out/$name" \
    --summary_json="$out/$name.json" "$@" > "$out/$name.log" 2>&1 ||
    { echo "$name failed:"; tail -5 "$out/$name.log"; return 1; }
  python3 - "$name" "$out/$name.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[2]))
measured, predicted = s["step_seconds"], s["predicted_step_seconds"]
calibration = ("%d kernels measured" % s["calibrated_kernels_measured"] if s["calibrated_kernels_cached"] == 0
               else "%d cached, %d measured" % (s["calibrated_kernels_cached"], s["calibrated_kernels_measured"]))
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
