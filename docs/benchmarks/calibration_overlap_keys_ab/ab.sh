#!/bin/bash
# A/B of calibration keyed by overlap: examples/calibration_accuracy.sh with two binaries, alternating.
set -euo pipefail
cd /work/main
out=$1; rounds=$2
for ((r = 1; r <= rounds; r++)); do
  for v in before after; do
    bin=/tmp/train_$v
    examples/calibration_accuracy.sh $bin /tmp/ab_$v$r > /dev/null
    mkdir -p $out/$v/run$r
    for n in plain_first plain_cached pipeline_first pipeline_cached; do cp /tmp/ab_$v$r/$n.json $out/$v/run$r/; done
    echo "round $r $v done"
  done
done
