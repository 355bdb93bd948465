#!/usr/bin/env bash
# Are the same kernels slower in the pipeline's steps than in the plain step's
# (compute sharing the 2 cores with overlapped Gloo collectives)? And what does the simulator
# predict from each run's own steps' times? N pairs of 66-step runs (plain, then the pipeline
# of tools/calibration_ab.sh), each into a fresh MAGI_CACHE_DIR, recording its steps' node times
# (--calibration_out) and its graph (--dump_graph).
#   docs/benchmarks/cpu_pipeline_steps/run.sh TRAIN MAGI OUT N
# (TRAIN: bazel-bin/examples/train, MAGI: bazel-bin/magi/tools/magi; from the repository root.)
set -euo pipefail
train=$1; magi=$2; out=$3; n=${4:-4}
mkdir -p "$out"
for ((i = 1; i <= n; i++)); do
  mkdir -p "$out/run$i"
  for c in plain pipeline; do
    flags=(--steps=66 --checkpoint=false)
    [[ $c == pipeline ]] && flags+=(--passes='bucket-collectives,schedule-overlap{prefetch=2}')
    rm -rf "$out/cache"
    MAGI_CACHE_DIR="$out/cache" "$train" "${flags[@]}" --out_dir="$out/train" --summary_json="$out/run$i/$c.json" \
      --calibration_out="$out/run$i/$c.csv" --dump_graph="$out/$c.mir" > "$out/run$i/$c.log" 2>&1
    echo "run $i $c: $(grep '^step graph' "$out/run$i/$c.log")"
    echo "  simulated from its own steps: $("$magi" simulate "$out/$c.mir" --device=cpu \
      --calibration="$out/run$i/$c.csv" | grep 'step time')"
  done
  python3 tools/compare_step_tables.py "$out/run$i/plain.csv" "$out/run$i/pipeline.csv" --steps=65 | sed -n 2p
done
rm -rf "$out/cache" "$out/train"
