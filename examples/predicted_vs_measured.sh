#!/usr/bin/env bash
# Predicted vs measured step time and peak memory of examples:train under several
# pipelines, one row each (for docs/passes.md; keeps each run's summary OUT_DIR/NAME.json). Usage:
#   examples/predicted_vs_measured.sh TRAIN_BINARY OUT_DIR [train flags...]
# e.g. on the GPU machine: ... bazel-bin/examples/train /tmp/pvm --device=cuda --world_size=2 --model=small
# The last run uses a budget 10% under the plain run's predicted peak (strategy search).
set -euo pipefail
train=$1; out=$2; shift 2
mkdir -p "$out"
run() {
  local name=$1; shift
  "$train" --steps=30 --out_dir="$out/$name" --summary_json="$out/$name.json" "$@" > "$out/$name.log" 2>&1 ||
    { echo "$name failed:"; tail -5 "$out/$name.log"; return 1; }
}
run plain "$@"
run prefetch1 --passes='schedule-overlap{prefetch=1}' "$@"
run reshard_prefetch2 --passes='reshard-after-forward{mode=reshard},schedule-overlap{prefetch=2}' "$@"
budget=$(python3 -c "import json; print(json.load(open('$out/plain.json'))['predicted_peak_memory_bytes'] * 0.9 / 1e9)")
run budget_90pct --memory_budget_gb="$budget" "$@"
# The table docs/passes.md shows (tools/doc_tables.py renders it there from the same summaries).
rows=()
for name in plain prefetch1 reshard_prefetch2 budget_90pct; do rows+=("--row=$name=$out/$name.json"); done
python3 "$(dirname "${BASH_SOURCE[0]}")/../tools/doc_tables.py" render summaries "${rows[@]}" \
  --columns=pipeline,step_predicted,step_measured,peak_predicted,peak_measured,loss --header=loss=loss
