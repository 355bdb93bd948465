# Session 18, call C: --check_eager's reference draws its initial weights as the model did (the
# model's dtype; the host with --init=meta), then trains in fp32 (examples/train.cc). The small
# bf16 model, both inits. Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/c; mkdir -p $R
for init in meta device; do
  bazel-bin/examples/train --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=20 \
    --untimed_steps=5 --lr=3e-4 --backend=nccl_stream --init=$init --check_eager --out_dir=/tmp/c_$init \
    --summary_json=$R/small_$init.json > $R/small_$init.log 2>&1
  echo "small $init rc=$?"
done
grep -h "step 1/\|largest" $R/small_*.log
cd $OUT && tar czf c.tar.gz c && rm -rf c
