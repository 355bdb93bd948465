# Session 17, call A: the 953M benchmark (Magi vs FSDP2 eager and compiled) on one H200.
# Kept as run (it was .device/run24a.sh): on the GPU machine, from the repository root, with
# tools/device_sysroot.sh run here first and .device carried; $OUT is the device tool's output folder.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train //examples:generate //magi/tools:magi_compare 2>&1 | tail -3
unset CC CXX
mkdir -p $OUT/a
python3 benchmarks/fsdp_1b.py --train bazel-bin/examples/train --out_dir /tmp/f --magi_runs=10 --steps=30 --warmup=5 > $OUT/a/fsdp_1b.log 2>&1
echo "fsdp_1b rc=$?"
tail -8 $OUT/a/fsdp_1b.log
cp /tmp/f/results.json /tmp/f/table.md $OUT/a/ 2>/dev/null
cp /tmp/f/magi10.json $OUT/a/ 2>/dev/null
ls /tmp/f | head -30
