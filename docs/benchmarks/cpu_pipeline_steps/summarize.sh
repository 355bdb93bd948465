#!/usr/bin/env bash
# Prints, for each run kept beside this script (run*/ and script_check/), the measured step
# mean, what the simulator predicts from that run's own steps' node times, the difference, and
# the compute one pipeline step runs timed by the plain run's table against the pipeline's own.
#   docs/benchmarks/cpu_pipeline_steps/summarize.sh MAGI > results.txt
# (MAGI: bazel-bin/magi/tools/magi; from the repository root.)
set -euo pipefail
magi=$1
dir=$(dirname "$0")
for run in "$dir"/run[0-9]* "$dir"/script_check; do
  for c in plain pipeline; do
    measured=$(python3 -c "import json,sys; print('%.3f' % (json.load(open(sys.argv[1]))['step_seconds'] * 1e3))" \
      "$run/$c.json")
    simulated=$("$magi" simulate "$dir/$c.mir" --device=cpu --calibration="$run/$c.csv" |
      awk '/step time/ {print $3}')
    echo "$(basename "$run") $c: measured $measured ms, simulated from its own steps $simulated ms," \
      "difference $(python3 -c "print('%.3f' % ($simulated - $measured))") ms" \
      "($(python3 -c "print('%+.1f' % (100 * ($simulated - $measured) / $measured))")%)"
  done
  echo "$(basename "$run") $(python3 tools/compare_step_tables.py "$run/plain.csv" "$run/pipeline.csv" --steps=65 |
    sed -n 2p)"
done
