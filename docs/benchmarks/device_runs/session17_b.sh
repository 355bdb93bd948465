# Session 17, call B: deterministic mode, CPU offload, and --check_eager on one H200 (binaries of call A).
# Kept as run (it was .device/run24b.sh; only `tail -n 3` fixed): see session17_a.sh.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train //examples:generate //magi/tools:magi_compare 2>&1 | tail -2
unset CC CXX
R=$OUT/b; mkdir -p $R/det
(OUT_DIR=/tmp/det BUILD=0 bash tools/deterministic_gpu.sh > $R/det/deterministic_gpu.log 2>&1; echo "deterministic rc=$?")
cp /tmp/det/table.md /tmp/det/*.json $R/det/ 2>/dev/null
T=bazel-bin/examples/train
for v in device offload; do
  extra=""; [[ $v == offload ]] && extra=--cpu_offload
  $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=20 --untimed_steps=5 \
     --lr=3e-4 --backend=nccl_stream $extra --out_dir=/tmp/o_$v --summary_json=$R/cpu_offload_$v.json > $R/cpu_offload_$v.log 2>&1
  echo "offload $v rc=$?"
done
$T --device=cuda --world_size=1 --steps=20 --check_eager --checkpoint=false --out_dir=/tmp/e1 --summary_json=$R/check_eager_tiny.json > $R/check_eager_tiny.log 2>&1; echo "eager tiny rc=$?"
$T --device=cuda --world_size=1 --model=small --steps=20 --batch_size=16 --seq_len=128 --check_eager --checkpoint=false --out_dir=/tmp/e2 --summary_json=$R/check_eager_small.json > $R/check_eager_small.log 2>&1; echo "eager small rc=$?"
tail -n 3 $R/*.log
cat $R/det/table.md
cd $OUT && tar czf b.tar.gz b && rm -rf b
