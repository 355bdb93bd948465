#!/usr/bin/env bash
# Decode profile run (not committed).
set -uo pipefail
T0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - T0) )); }
source .device/start.sh
export MAGI_SYSROOT=$PWD/.device/sysroot
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:generate 2>&1 | tail -3 || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
G=bazel-bin/examples/generate
export MAGI_INDUCTOR_CACHE=/tmp/inductor_cache
common="--model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint_dir= --seq_len=144 --length=128 --warmup_forwards=2 --calibration=none --progress_s=0"
printf 'Sonnet 18: Shall' > $OUT/p1.txt   # 16 bytes + newline-free
python3 - <<'PY' > $OUT/p8.txt
for i in range(8): print(("Prompt %d: lorem ipsum dolor" % i)[:16])
PY
run() { local name=$1; shift; [[ $(left) -lt 40 ]] && { echo "skip $name"; return; }; echo "=== $name"; local s=$(date +%s); timeout $(left) $G $common "$@" > $OUT/$name.out 2> $OUT/$name.err; echo "rc=$? $(( $(date +%s) - s )) s"; grep -E "^magi: (decode|prefill|peak|compiled)|rror|declin|fell back|AOTInductor" $OUT/$name.err | head -12; }
run ind_b1 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p1.txt --dump_graphs=$OUT/graphs_ind --dump_weights=$OUT/weights
run ind_b1_trace --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p1.txt --length=16 --kernel_trace=$OUT/ind_b1.trace.json
PT="python3 benchmarks/pytorch/generate_llama.py --model=1b --vocab_size=256 --weights=$OUT/weights --length=128 --device=cuda --dtype=bf16 --warmup=2 --runs=3"
if [[ $(left) -gt 90 ]]; then echo "=== torch compile b1"; timeout $(left) $PT --prompts_file=$OUT/p1.txt --batch_size=1 --mode=compile --out=$OUT/torch_b1.json > $OUT/torch_b1.log 2>&1; echo rc=$?; tail -3 $OUT/torch_b1.log; cat $OUT/torch_b1.json | head -40; fi
run cg_b1 --backend='nccl_stream{cuda_graph=true}' --prompts_file=$OUT/p1.txt
run ind_b8 --backend='nccl_stream{cuda_graph=true}' --partition_backends=inductor --prompts_file=$OUT/p8.txt --batch_size=8
if [[ $(left) -gt 90 ]]; then echo "=== torch compile b8"; timeout $(left) $PT --prompts_file=$OUT/p8.txt --batch_size=8 --mode=compile --out=$OUT/torch_b8.json > $OUT/torch_b8.log 2>&1; echo rc=$?; tail -3 $OUT/torch_b8.log; fi
for t in $OUT/*.trace.json; do [[ -f $t ]] && python3 tools/kernel_breakdown.py $t --top 30 > $t.breakdown.md 2>&1 && head -90 $t.breakdown.md; done
rm -f $OUT/weights*; gzip -f $OUT/*.trace.json 2>/dev/null; du -sh $OUT
