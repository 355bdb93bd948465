# Session 18, call B: attention on meta for a CUDA step is flash attention (compat/attention.h).
# The unit tests on PyTorch 2.11; the small model initialized on the device and on meta (with
# --check_eager: each against eager LibTorch); the 953M step with --init=device and --init=meta
# side by side (benchmarks/inductor_settings.py, 2 rounds). Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL test $BAZEL_FLAGS --config=cuda --config=opt //magi/compat:attention_test //magi/frontend/capture:capture_test \
  2>&1 | tail -n 4
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/b; mkdir -p $R
T=bazel-bin/examples/train
for init in device meta; do
  $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=20 --untimed_steps=5 \
     --lr=3e-4 --backend=nccl_stream --init=$init --check_eager --out_dir=/tmp/s_$init \
     --summary_json=$R/small_$init.json --dump_graph=$R/small_$init.mir > $R/small_$init.log 2>&1
  echo "small $init rc=$?"
done
tail -n 4 $R/small_*.log
grep -c "_scaled_dot_product_flash_attention\b\|_scaled_dot_product_cudnn_attention\b" $R/small_*.mir
timeout 400 python3 benchmarks/inductor_settings.py --train $T --out_dir /tmp/i --variant device= --variant meta= \
    --variant_flags meta=--init=meta --rounds 2 --steps 25 --warmup 5 > $R/init_ab.log 2>&1
echo "init A/B rc=$?"
cp /tmp/i/results.json $R/init_ab.json 2>/dev/null
tail -n 8 $R/init_ab.log
cd $OUT && tar czf b.tar.gz b && rm -rf b
