#!/bin/bash
# A/B of calibration keyed by overlap across pipelines: examples/predicted_vs_measured.sh (four
# pipelines sharing one fresh cache) with two binaries, alternating.
set -euo pipefail
cd /work/main
out=$1; rounds=$2
for ((r = 1; r <= rounds; r++)); do
  for v in before after; do
    rm -rf /tmp/abp_cache_$v$r
    MAGI_CACHE_DIR=/tmp/abp_cache_$v$r examples/predicted_vs_measured.sh /tmp/train_$v /tmp/abp_$v$r > /dev/null
    mkdir -p $out/$v/run$r
    for n in plain prefetch1 reshard_prefetch2 budget_90pct; do cp /tmp/abp_$v$r/$n.json $out/$v/run$r/; done
    echo "round $r $v done"
  done
done
