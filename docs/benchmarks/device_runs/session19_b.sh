# Session 19, call B: examples:train now says what PyTorch's GEMM workspaces hold beyond the
# plan (magi/compat/gemm_workspace.h; "gemm_workspace_bytes" in the summary). The small step
# eager and as a CUDA graph, then the 953M inductor step as the benchmarks run it, with
# calibration by default (its predicted peak counts the partitions' measured working bytes).
# Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/b; mkdir -p $R
T=bazel-bin/examples/train
for v in eager graph; do
  backend=nccl_stream; [[ $v == graph ]] && backend='nccl_stream{cuda_graph=true}'
  $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=12 --untimed_steps=2 \
     --lr=3e-4 --calibration=none --backend="$backend" --out_dir=/tmp/o_$v --summary_json=$R/small_$v.json \
     > $R/small_$v.log 2>&1
  echo "small $v rc=$? $(grep '^step graph' $R/small_$v.log)"
done
timeout 420 $T --model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=15 --untimed_steps=5 \
   --lr=3e-4 --device_profile=h200 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor \
   --out_dir=/tmp/o_1b --summary_json=$R/1b_inductor.json > $R/1b_inductor.log 2>&1
echo "1b inductor rc=$? $(grep '^step graph' $R/1b_inductor.log)"
grep "^magi: calibrat" $R/1b_inductor.log | head -5
cd $OUT && tar czf b.tar.gz b && rm -rf b
