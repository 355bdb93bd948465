# Session 19, call C: PyTorch's GEMM workspaces predicted (FsdpTrainer::predicted_library_device_bytes,
# from TorchExecutable::LibraryDeviceBytesRunsAdd) against what is held after the steps. The GPU
# test (it checks the two are equal, eager and as a CUDA graph), then the small step eager, as a
# CUDA graph, with --init=meta (nothing held before the first step), with --cpu_offload (asked
# for a CUDA graph; its host tensors keep the step in stream mode, so no capture stream), and the
# 953M inductor step. Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL test $BAZEL_FLAGS --config=cuda --config=opt //tests/gpu:nccl_stream_training_test 2>&1 | tail -n 3
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
R=$OUT/c; mkdir -p $R
cp bazel-testlogs/tests/gpu/nccl_stream_training_test/test.log $R/nccl_stream_training_test.log 2>/dev/null
grep -E "^\[ *(OK|FAILED|SKIPPED) " $R/nccl_stream_training_test.log
unset CC CXX
T=bazel-bin/examples/train
run() {  # run NAME BACKEND [train flags...]
  local name=$1 backend=$2; shift 2
  $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=12 --untimed_steps=2 \
     --lr=3e-4 --calibration=none --backend="$backend" --out_dir=/tmp/o_$name --summary_json=$R/small_$name.json \
     "$@" > $R/small_$name.log 2>&1
  echo "small $name rc=$? $(grep '^step graph' $R/small_$name.log)"
}
run eager nccl_stream
run graph 'nccl_stream{cuda_graph=true}'
run graph_meta 'nccl_stream{cuda_graph=true}' --init=meta
run offload 'nccl_stream{cuda_graph=true}' --cpu_offload
timeout 400 $T --model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=15 --untimed_steps=5 \
   --lr=3e-4 --device_profile=h200 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor \
   --out_dir=/tmp/o_1b --summary_json=$R/1b_inductor.json > $R/1b_inductor.log 2>&1
echo "1b inductor rc=$? $(grep '^step graph' $R/1b_inductor.log)"
cd $OUT && tar czf c.tar.gz c && rm -rf c
