# Session 19, call A: what the caching allocator's peak holds beyond the planned step.
# cublas_workspace_probe.py (PyTorch's GEMM workspaces, first use per path and stream), then the
# small model's step (nccl_stream, eager and as a CUDA graph) with PyTorch's default GEMM
# workspaces and with them set to zero (CUBLAS_WORKSPACE_CONFIG / CUBLASLT_WORKSPACE_SIZE) or
# shared (TORCH_CUBLASLT_UNIFIED_WORKSPACE=1). Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/a; mkdir -p $R
P=docs/benchmarks/device_runs/cublas_workspace_probe.py
python3 $P > $R/probe.log 2>&1; echo "probe rc=$?"
CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0 python3 $P > $R/probe_zero.log 2>&1; echo "probe_zero rc=$?"
TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 python3 $P > $R/probe_unified.log 2>&1; echo "probe_unified rc=$?"
T=bazel-bin/examples/train
run() {  # run NAME BACKEND [ENV=VALUE...]
  local name=$1 backend=$2; shift 2
  env "$@" $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=12 \
    --untimed_steps=2 --lr=3e-4 --calibration=none --backend="$backend" --out_dir=/tmp/o_$name \
    --summary_json=$R/$name.json > $R/$name.log 2>&1
  echo "$name rc=$? $(grep '^step graph' $R/$name.log)"
}
run eager nccl_stream
run eager_zero nccl_stream CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0
run eager_unified nccl_stream TORCH_CUBLASLT_UNIFIED_WORKSPACE=1
run graph 'nccl_stream{cuda_graph=true}'
run graph_zero 'nccl_stream{cuda_graph=true}' CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0

cat $R/probe*.log
cd $OUT && tar czf a.tar.gz a && rm -rf a
