#!/usr/bin/env bash
# Predicted vs measured step time and peak memory of examples:train under several
# pipelines, one line each (for docs/passes.md). Usage:
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
  python3 - "$name" "$out/$name.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[2]))
print("| %s | %s | %.1f ms | %.1f ms | %.3f MB | %.3f MB | %.4f -> %.4f |" % (
    sys.argv[1], s["pipeline"] or "(none)", s["predicted_step_seconds"] * 1e3, s["step_seconds"] * 1e3,
    s["predicted_peak_memory_bytes"] / 1e6, s["peak_memory_bytes"] / 1e6, s["initial_loss"], s["final_loss"]))
PY
}
echo "| run | pipeline | step predicted | step measured | peak predicted | peak measured | loss |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
run plain "$@"
run prefetch1 --passes='schedule-overlap{prefetch=1}' "$@"
run reshard_prefetch2 --passes='reshard-after-forward{mode=reshard},schedule-overlap{prefetch=2}' "$@"
budget=$(python3 -c "import json; print(json.load(open('$out/plain.json'))['predicted_peak_memory_bytes'] * 0.9 / 1e9)")
run budget_90pct --budget_gb="$budget" "$@"
