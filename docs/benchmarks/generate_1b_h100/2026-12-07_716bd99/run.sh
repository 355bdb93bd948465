#!/usr/bin/env bash
# Run on the GPU machine as `bash run.sh` from the workspace root (the device tool, with `.device/` from
# tools/device_sysroot.sh carried). STAGES picks and orders what runs; this run: call A
# STAGES="b1 b1cd torch_b1 torch_b1_nocd gen_test", call B STAGES="gen_test cuda_py b1cd torch_b1".
set -uo pipefail
T0=$(date +%s)
left() { echo $(( ${BUDGET:-575} - ($(date +%s) - T0) )); }
source .device/start.sh
export MAGI_SYSROOT=$PWD/.device/sysroot
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt --keep_going ${BUILD_TARGETS:-//examples:generate //tests/gpu:generation_test //magi/frontend/python:pkg} 2>&1 | grep -E "ERROR|error:|Build completed|FAILED" | head -20
echo "build done at $(( $(date +%s) - T0 )) s"
G=bazel-bin/examples/generate
export MAGI_INDUCTOR_CACHE=/tmp/inductor_cache
common="--model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint_dir= --seq_len=144 --length=128 --warmup_forwards=2 --calibration=none --progress_s=0"
printf 'Sonnet 18: Shall' > $OUT/p1.txt
python3 - <<'PY' > $OUT/p8.txt
for i in range(8): print(("Prompt %d: lorem ipsum dolor" % i)[:16])
PY
python3 - <<'PY' > $OUT/p32.txt
for i in range(32): print(("Prompt %d: lorem ipsum dolor" % i)[:16])
PY
run() { local name=$1; shift; [[ $(left) -lt 40 ]] && { echo "skip $name"; return; }; echo "=== $name"; local s=$(date +%s); (unset CC CXX; timeout $(left) $G $common "$@" > $OUT/$name.out 2> $OUT/$name.err); echo "rc=$? $(( $(date +%s) - s )) s"; grep -E "^magi: (decode|prefill|peak|compiled|warm|compile)|rror|declin|fell back|arning" $OUT/$name.err | head -12; }
PT="python3 benchmarks/pytorch/generate_llama.py --model=1b --vocab_size=256 --weights=$OUT/weights --length=128 --device=cuda --dtype=bf16 --warmup=2 --runs=3"
pt() { local name=$1; shift; [[ $(left) -lt 90 ]] && { echo "skip $name"; return; }; echo "=== $name"; (unset CC CXX; timeout $(left) $PT "$@" --out=$OUT/$name.json > $OUT/$name.log 2>&1); echo rc=$?; tail -4 $OUT/$name.log; }
gtest() { local name=$1; [[ $(left) -lt 60 ]] && { echo "skip $name"; return; }; echo "=== $name"; local s=$(date +%s)
  (unset CC CXX; timeout $(( $(left) - 10 )) bazel-bin/tests/gpu/$name > $OUT/$name.log 2>&1); echo "rc=$? $(( $(date +%s) - s )) s"
  grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|differ|within" $OUT/$name.log | head -30; }
for stage in ${STAGES:-gen_test cuda_py b1cd torch_b1 trace1cd b8cd torch_b8 sampled}; do
  case $stage in
    b1) run ind_b1 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p1.txt --dump_weights=$OUT/weights ;;
    torch_b1) pt torch_b1 --prompts_file=$OUT/p1.txt --batch_size=1 --mode=compile ;;
    torch_b1_nocd) pt torch_b1_nocd --prompts_file=$OUT/p1.txt --batch_size=1 --mode=compile --no-coordinate_descent_tuning ;;
    b1cd) run ind_b1_cd --backend='nccl_stream{cuda_graph=true}' --partition_backends='inductor{config.coordinate_descent_tuning=true}' --prompts_file=$OUT/p1.txt --dump_weights=$OUT/weights ;;
    b8cd) run ind_b8_cd --backend='nccl_stream{cuda_graph=true}' --partition_backends='inductor{config.coordinate_descent_tuning=true}' --prompts_file=$OUT/p8.txt --batch_size=8 --dump_weights=$OUT/weights ;;
    trace1cd) run ind_b1_cd_trace --backend='nccl_stream{cuda_graph=true}' --partition_backends='inductor{config.coordinate_descent_tuning=true}' --prompts_file=$OUT/p1.txt --length=32 --kernel_trace=$OUT/ind_b1_cd.trace.json ;;
    b8) run ind_b8 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p8.txt --batch_size=8 ;;
    torch_b8) pt torch_b8 --prompts_file=$OUT/p8.txt --batch_size=8 --mode=compile ;;
    sampled) run ind_b8_sampled --backend='nccl_stream{cuda_graph=true}' --partition_backends='inductor{config.coordinate_descent_tuning=true}' --prompts_file=$OUT/p8.txt --batch_size=8 --temperature=0.8 --top_k=40 ;;
    det_b8) run det_b8 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p8.txt --batch_size=8 --deterministic --invariant_batch=8 ;;
    b32) run ind_b32 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p32.txt --batch_size=32 ;;
    torch_b32) pt torch_b32 --prompts_file=$OUT/p32.txt --batch_size=32 --mode=compile ;;
    trace8) run ind_b8_trace --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p8.txt --batch_size=8 --length=32 --temperature=0.8 --top_k=40 --kernel_trace=$OUT/ind_b8.trace.json ;;
    gen_test) gtest generation_test ;;
    nccl_train) gtest nccl_stream_training_test ;;
    ind_train) gtest inductor_training_test ;;
    cuda_py) [[ $(left) -lt 60 ]] && { echo "skip cuda_py"; continue; }; echo "=== cuda_backends_test"; s=$(date +%s)
      (unset CC CXX; PYTHONPATH=bazel-bin/magi/frontend/python/pkg timeout $(( $(left) - 10 )) python3 magi/frontend/python/cuda_backends_test.py -v > $OUT/cuda_backends_test.log 2>&1); echo "rc=$? $(( $(date +%s) - s )) s"; tail -15 $OUT/cuda_backends_test.log ;;
  esac
done
for t in $OUT/*.trace.json; do [[ -f $t ]] && python3 tools/kernel_breakdown.py $t --top 30 > $t.breakdown.md 2>&1 && head -45 $t.breakdown.md; done
rm -f $OUT/weights*; gzip -f $OUT/*.trace.json 2>/dev/null
(cd $OUT && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz .); du -sh $OUT
