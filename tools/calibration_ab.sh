#!/usr/bin/env bash
# A/B of calibration by default between two builds of examples:train on this machine: the
# first run of each configuration (a fresh cache: its prediction comes from its own
# calibration), the two binaries alternating (in either order as often) so that both see
# the same machine, N pairs. Keeps each
# run's summary as OUT_DIR/runI/{plain,pipeline}_{old,new}.json and prints the markdown
# table that tools/doc_tables.py renders from them (prediction-errors: each run's
# predicted/measured step and error, how many within 10%).
#   tools/calibration_ab.sh OLD_TRAIN NEW_TRAIN OUT_DIR [N]
# (Run from the repository root: examples:train reads examples/data/.)
set -euo pipefail
old=$1; new=$2; out=$3; pairs=${4:-8}
mkdir -p "$out"
pipeline='bucket-collectives,schedule-overlap{prefetch=2}'
for ((i = 1; i <= pairs; i++)); do
  mkdir -p "$out/run$i"
  for config in plain pipeline; do
    flags=(--steps=66 --checkpoint=false)
    [[ $config == pipeline ]] && flags+=(--passes="$pipeline")
    sides=(old new)
    ((i % 2 == 0)) && sides=(new old)  # either order as often: neither always runs first
    for side in "${sides[@]}"; do
      binary=$old; [[ $side == new ]] && binary=$new
      name="${config}_${side}"
      rm -rf "$out/cache"
      MAGI_CACHE_DIR="$out/cache" "$binary" "${flags[@]}" --out_dir="$out/train" --summary_json="$out/run$i/$name.json" \
        > "$out/run$i/$name.log" 2>&1 || { echo "run $i $name failed:" >&2; tail -5 "$out/run$i/$name.log" >&2; exit 1; }
    done
  done
done
rm -rf "$out/cache" "$out/train"
python3 "$(dirname "${BASH_SOURCE[0]}")/doc_tables.py" render prediction-errors --name=plain_old --name=plain_new \
  --name=pipeline_old --name=pipeline_new --runs="$out"
