#!/usr/bin/env bash
# The GPU check: builds and runs every GPU test and the GPU benchmarks on the GPU machine, writes
# the benchmarks' raw results where docs/benchmarks.md reads them, and ends with ONE summary table
# (check, kind, result, time). Exit status 0 only if every selected check passed.
#
# On the GPU machine (PyTorch 2.11 + CUDA 13, no Bazel installed), after `tools/device_sysroot.sh`
# on the build machine and with `.device/` carried there (docs/building.md, "The GPU machine"):
#
#   tools/gpu_check.sh                     # everything (~70 min of GPU: see --list)
#   tools/gpu_check.sh --tests             # the tests only
#   tools/gpu_check.sh --benchmarks        # the benchmarks only
#   tools/gpu_check.sh --only=fsdp_1b,deterministic_gpu
#   tools/gpu_check.sh --list              # the checks, their kind and rough GPU minutes
#   tools/gpu_check.sh --dry-run           # print the commands instead of running them
#
# Options:
#   --tests / --benchmarks   select one kind (default both); --only=NAME,... selects by name
#   --run=NAME               the run's name in the raw results' paths (default DATE_COMMIT from
#                            `date +%F` and `git rev-parse --short HEAD`; pass it where the GPU
#                            machine's copy of the tree has no .git)
#   --raw=DIR                where raw results go (default docs/benchmarks: the layout the docs
#                            render from; give a folder that comes back from the GPU machine and
#                            copy it over docs/benchmarks/ afterwards)
#   --work=DIR               logs and full outputs (default /tmp/magi_gpu_check)
#   --gpu=NAME               the GPU's short name in folder names (default from nvidia-smi: h100, h200)
#   --no-build               use the binaries already in bazel-bin/
#   --dry-run                print every command, run none (no GPU, Bazel or .device needed)
#
# What each check runs is the command its section of docs/benchmarks.md names; after a run,
# point the docs' tables at the new raw files and `tools/doc_tables.py write` re-renders them.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

# name|kind|rough GPU minutes after the build|what
CHECKS=(
  "gpu_tests|test|6|every test tagged cuda (bazel test), and the tests whose CUDA cases run only where a GPU is"
  "deterministic_gpu|test|3|tools/deterministic_gpu.sh: deterministic training and generation bitwise, and their cost"
  "check_eager|test|1|examples:train --check_eager (tiny and small, fp32): Magi's losses against eager LibTorch"
  "meta_capture|test|1|the small step captured on meta is the text IR of the one captured on the device"
  "fsdp_1b|benchmark|5|the 953M step: Magi against PyTorch FSDP2 eager and FSDP2 + per-block torch.compile"
  "inductor_settings|benchmark|7|Inductor's own settings on the 953M step (benchmarks/inductor_settings.py)"
  "meta_init|benchmark|6|the 953M step with --init=device and --init=meta side by side"
  "cpu_offload|benchmark|1|the small step on the device and with --cpu_offload"
  "gemm_workspace|benchmark|3|PyTorch's GEMM workspaces predicted against held (small steps, the 953M step)"
  "calibration|benchmark|6|the 953M step's predicted time with calibration by default, cold and cached"
  "budget_sweep|benchmark|8|the strategy search's plans along the memory budget, each run and measured"
  "kernel_profile|benchmark|3|kernel-level breakdown of the 953M step (benchmarks/kernel_profile.sh)"
  "generate_1b|benchmark|25|generation, 953M shape: Magi against PyTorch static-cache eager and torch.compile reduce-overhead"
)
# The tests tagged "cuda" (`bazel query 'attr(tags, "\bcuda\b", tests(//...))'`; the check below
# fails when one is missing here), then those with CUDA cases that skip where no GPU is.
GPU_TESTS=(
  //tests/gpu:nccl_stream_training_test
  //tests/gpu:inductor_training_test
  //tests/gpu:generation_test
  //magi/frontend/python:cuda_backends_test
  //magi/backend/common:fused_adamw_test
  //magi/backend/megakernel:decode_kernel_test
  //magi/backend/nccl_stream:graph_memsets_test
  //magi/frontend/capture:capture_cuda_test
  //magi/runtime/nccl:nccl_communicator_test
  //magi/runtime/nvml:gpu_energy_gpu_test
  //third_party/cuda:nccl_configure_test
)
CUDA_CASE_TESTS=(
  //magi/calibration:cuda_timing_test
  //magi/compat:attention_test
  //magi/frontend/capture:capture_test
)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

kinds="test benchmark"
only=""
run_name=""
raw=docs/benchmarks
work=/tmp/magi_gpu_check
gpu=""
build=1
dry=0
list=0
for arg in "$@"; do
  case $arg in
    --tests) kinds="test" ;;
    --benchmarks) kinds=benchmark ;;
    --only=*) only=${arg#--only=} ;;
    --run=*) run_name=${arg#--run=} ;;
    --raw=*) raw=${arg#--raw=} ;;
    --work=*) work=${arg#--work=} ;;
    --gpu=*) gpu=${arg#--gpu=} ;;
    --no-build) build=0 ;;
    --dry-run) dry=1 ;;
    --list) list=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$arg' (--help lists the options)" >&2; exit 2 ;;
  esac
done

if [[ $list == 1 ]]; then
  printf '%-18s %-10s %5s  %s\n' check kind min what
  for c in "${CHECKS[@]}"; do IFS='|' read -r n k m w <<<"$c"; printf '%-18s %-10s %5s  %s\n' "$n" "$k" "$m" "$w"; done
  exit 0
fi

# The checks selected, in CHECKS' order.
selected=()
known=" "
for c in "${CHECKS[@]}"; do IFS='|' read -r n k _ _ <<<"$c"; known+="$n "; done
if [[ -n $only ]]; then
  for n in ${only//,/ }; do
    [[ $known == *" $n "* ]] || { echo "gpu_check: no check '$n' (--list lists them)" >&2; exit 2; }
  done
fi
for c in "${CHECKS[@]}"; do
  IFS='|' read -r n k _ _ <<<"$c"
  if [[ -n $only ]]; then [[ ",$only," == *",$n,"* ]] && selected+=("$n")
  elif [[ " $kinds " == *" $k "* ]]; then selected+=("$n"); fi
done
kind_of() { local c n k; for c in "${CHECKS[@]}"; do IFS='|' read -r n k _ _ <<<"$c"; [[ $n == "$1" ]] && echo "$k"; done; }

# The scripts the checks run: a rename shows here (and in //tools:gpu_check_test), not on the GPU.
for script in tools/deterministic_gpu.sh benchmarks/fsdp_1b.py benchmarks/pytorch/fsdp2_llama.py \
    benchmarks/inductor_settings.py benchmarks/kernel_profile.sh tools/kernel_breakdown.py \
    benchmarks/generate_1b.py benchmarks/pytorch/generate_llama.py; do
  [[ -f $script ]] || { echo "gpu_check: $script is missing" >&2; exit 2; }
done

if [[ -z $run_name ]]; then
  commit=$(git rev-parse --short HEAD 2>/dev/null) || commit=nogit
  run_name="$(date +%F)_$commit"
fi
if [[ -z $gpu ]]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr '[:upper:]' '[:lower:]' |
        grep -o -E '[a-z][0-9]{2,3}' | head -1)
  gpu=${gpu:-gpu}
fi

# The environment: Bazel 2.1 and the image's LibTorch (.device/start.sh, from tools/device_sysroot.sh).
if [[ $dry == 1 ]]; then
  # shellcheck disable=SC2016  # printed as written: the GPU machine's .device/start.sh sets them
  BAZEL=${BAZEL:-'$BAZEL'} BAZEL_FLAGS=${BAZEL_FLAGS:-'$BAZEL_FLAGS'}
elif [[ -z ${BAZEL:-} ]]; then
  if [[ -f .device/start.sh ]]; then
    # shellcheck disable=SC1091  # written by tools/device_sysroot.sh
    source .device/start.sh || { echo "gpu_check: .device/start.sh failed" >&2; exit 2; }
  else
    echo "gpu_check: no \$BAZEL and no .device/start.sh: run tools/device_sysroot.sh on the build machine" \
         "and carry .device to the GPU machine (docs/building.md, \"The GPU machine\")" >&2
    exit 2
  fi
fi
read -r -a bazel_flags <<<"$BAZEL_FLAGS"
read -r -a bazel <<<"$BAZEL"
CONFIG=(--config=cuda --config=opt)
TRAIN="bazel-bin/examples/train"
GENERATE="bazel-bin/examples/generate"
mkdir -p "$work"

# run LOG COMMAND...: runs COMMAND with its output in LOG (or prints it under --dry-run).
run() {
  local log=$1
  shift
  if [[ $dry == 1 ]]; then
    # shellcheck disable=SC2016  # $BAZEL printed as written
    { printf '+'; printf ' %q' "$@"; printf ' > %s\n' "$log"; } | sed 's/\\\$BAZEL/$BAZEL/g'
    return 0
  fi
  mkdir -p "$(dirname "$log")"
  echo "+ $* > $log"
  "$@" >"$log" 2>&1
  local rc=$?
  [[ $rc == 0 ]] || { echo "gpu_check: exit $rc; the end of $log:"; tail -n 20 "$log"; }
  return $rc
}
# Inductor and Triton compile with the image's own compiler, not the CC that Bazel was given.
NOCC=(env -u CC -u CXX)
# keep FILE... DIR: copies results into the raw folder (skipped under --dry-run).
keep() {
  local dir=${*: -1}
  if [[ $dry == 1 ]]; then echo "+ cp ${*:1:$#-1} $dir/"; return 0; fi
  mkdir -p "$dir" && cp "${@:1:$#-1}" "$dir/"
}
# json FILE EXPRESSION: a summary's value (python3 of the image).
json() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, s))" "$@"; }
train() {  # train LOG SUMMARY FLAGS...: one examples:train process on one GPU
  local log=$1 summary=$2
  shift 2
  [[ $dry == 1 ]] || mkdir -p "$(dirname "$summary")"
  run "$log" "${NOCC[@]}" "$TRAIN" --device=cuda --world_size=1 --checkpoint=false --summary_json="$summary" "$@"
}
SMALL=(--model=small --dtype=bf16 --lr=3e-4)
ONE_B=(--model=1b --dtype=bf16 --lr=3e-4 --device_profile=h200)

ROWS=()        # check|result|seconds|details
failures=0
record() {  # record NAME RESULT SECONDS DETAILS
  ROWS+=("$1|$2|$3|$4")
  [[ $2 == PASS || $2 == "(dry run)" ]] || failures=$((failures + 1))
}
took() { echo $((SECONDS - start)); }  # seconds since the current check started
# outcome RC: PASS or FAIL (a dry run prints only)
outcome() { if [[ $dry == 1 ]]; then echo "(dry run)"; elif [[ $1 == 0 ]]; then echo PASS; else echo FAIL; fi; }

# ---------------------------------------------------------------------------------------------
# Tests

check_gpu_tests() {
  local log=$work/gpu_tests/bazel_test.log rc
  if [[ $dry == 0 ]]; then
    # A test tagged cuda that the list above lacks would go unrun: say so (and fail) when Bazel
    # can answer the query here.
    local listed missing
    listed=$(printf '%s\n' "${GPU_TESTS[@]}" | sort)
    if missing=$("${bazel[@]}" query 'attr(tags, "\bcuda\b", tests(//...))' 2>/dev/null | sort |
                 comm -23 - <(echo "$listed")) && [[ -n $missing ]]; then
      record gpu_tests_list FAIL 0 "tagged cuda but not in tools/gpu_check.sh's GPU_TESTS: $(tr '\n' ' ' <<<"$missing")"
    fi
  fi
  run "$log" "${bazel[@]}" test "${bazel_flags[@]}" "${CONFIG[@]}" --cache_test_results=no --test_output=errors \
      --color=no --curses=no --keep_going "${GPU_TESTS[@]}" "${CUDA_CASE_TESTS[@]}"
  rc=$?
  if [[ $dry == 1 ]]; then record gpu_tests "(dry run)" 0 "${#GPU_TESTS[@]} + ${#CUDA_CASE_TESTS[@]} targets"; return; fi
  # One row per target from Bazel's summary lines ("//a:b   PASSED in 12.3s").
  local target line status seconds found=0
  for target in "${GPU_TESTS[@]}" "${CUDA_CASE_TESTS[@]}"; do
    line=$(grep -E "^$target +" "$log" | tail -1)
    status=$(sed -E 's/^[^ ]+ +(\(cached\) )?([A-Z ]+[A-Z])( in .*)?$/\2/' <<<"$line")
    seconds=$(grep -o -E ' in [0-9.]+s' <<<"$line" | grep -o -E '[0-9.]+' | head -1)
    [[ -n $line ]] || status="NO RESULT"
    found=$((found + 1))
    local out=$work/gpu_tests/${target//[\/:]/_}.log
    cp "bazel-testlogs/$(sed -E 's|^//||; s|:|/|' <<<"$target")/test.log" "$out" 2>/dev/null
    if [[ $status == PASSED ]]; then
      record "$target" PASS "${seconds:-0}" "$(grep -c -E '^\[ +OK \]' "$out" 2>/dev/null || echo 0) cases passed"
    else
      record "$target" FAIL "${seconds:-0}" "$status; $out"
    fi
  done
  [[ $rc == 0 || $found -gt 0 ]] || record gpu_tests FAIL 0 "bazel test exited $rc: $log"
}

check_deterministic_gpu() {
  local out=$work/deterministic_gpu rc
  run "$work/deterministic_gpu.log" "${NOCC[@]}" env OUT_DIR="$out" BUILD=0 bash tools/deterministic_gpu.sh
  rc=$?
  keep "$work/deterministic_gpu.log" "$raw/deterministic_gpu/$run_name"
  [[ $dry == 1 ]] || cp "$out"/table.md "$out"/*.json "$raw/deterministic_gpu/$run_name/" 2>/dev/null
  record deterministic_gpu "$(outcome $rc)" "$(took)" "bitwise checks; table: $raw/deterministic_gpu/$run_name/table.md"
}

check_check_eager() {
  local dir=$raw/check_eager_$gpu/$run_name rc=0 worst
  train "$work/check_eager/tiny.log" "$dir/tiny.json" --steps=20 --check_eager --out_dir="$work/check_eager/tiny" || rc=1
  train "$work/check_eager/small.log" "$dir/small.json" --model=small --steps=20 --batch_size=16 --seq_len=128 \
      --check_eager --out_dir="$work/check_eager/small" || rc=1
  if [[ $dry == 0 && $rc == 0 ]]; then
    # fp32 on both sides: the losses agree to ~1e-7 (docs/fsdp.md); 1e-4 says something broke.
    worst=$(python3 -c "import json,sys; print(max(float(json.load(open(f))['eager_max_relative_loss_difference']) for f in sys.argv[1:]))" \
            "$dir/tiny.json" "$dir/small.json") || rc=1
    [[ $rc == 0 ]] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-4 else 1)" "$worst" || rc=1
  fi
  record check_eager "$(outcome $rc)" "$(took)" "largest relative loss difference to eager ${worst:-?} (bound 1e-4)"
}

check_meta_capture() {
  local dir=$raw/meta_init_$gpu/$run_name rc=0 init
  for init in device meta; do
    train "$work/meta_capture/small_$init.log" "$dir/small_$init.json" "${SMALL[@]}" --steps=20 --untimed_steps=5 \
        --backend=nccl_stream --init=$init --check_eager --out_dir="$work/meta_capture/$init" \
        --dump_graph="$dir/small_$init.mir" || rc=1
  done
  keep "$work/meta_capture/small_device.log" "$work/meta_capture/small_meta.log" "$dir"
  if [[ $dry == 1 ]]; then echo "+ cmp $dir/small_device.mir $dir/small_meta.mir"
  elif [[ $rc == 0 ]]; then cmp -s "$dir/small_device.mir" "$dir/small_meta.mir" || rc=1; fi
  record meta_capture "$(outcome $rc)" "$(took)" "small step's text IR, --init=meta vs --init=device: identical"
}

# ---------------------------------------------------------------------------------------------
# Benchmarks

check_fsdp_1b() {
  local out=$work/fsdp_1b dir=$raw/fsdp_1b_$gpu rc
  # Magi's best step (nccl_stream + CUDA graph + inductor + split masters) and the two FSDP2 columns.
  run "$work/fsdp_1b.log" "${NOCC[@]}" python3 benchmarks/fsdp_1b.py --train "$TRAIN" --out_dir "$out" --magi_runs=10 \
      --steps=30 --warmup=5
  rc=$?
  if [[ $dry == 1 ]]; then echo "+ cp $out/results.json $dir/$run_name.json; cp $out/magi10.json $dir/${run_name}_magi_summary.json"
  else
    mkdir -p "$dir" && cp "$out/results.json" "$dir/$run_name.json" && cp "$out/magi10.json" "$dir/${run_name}_magi_summary.json" &&
      cp "$work/fsdp_1b.log" "$dir/$run_name.log" || rc=1
  fi
  record fsdp_1b "$(outcome $rc)" "$(took)" "$dir/$run_name.json"
}

check_inductor_settings() {
  local out=$work/inductor_settings dir=$raw/inductor_settings rc
  run "$work/inductor_settings.log" "${NOCC[@]}" timeout 600 python3 benchmarks/inductor_settings.py --train "$TRAIN" \
      --out_dir "$out" --variant default= --variant combo=combo_kernels=true \
      --variant cdt=coordinate_descent_tuning=true --variant aggr=aggressive_fusion=true --rounds 2 --steps 25 --warmup 5
  rc=$?
  if [[ $dry == 1 ]]; then echo "+ cp $out/results.json $dir/$run_name.json"
  else mkdir -p "$dir" && cp "$out/results.json" "$dir/$run_name.json" && cp "$work/inductor_settings.log" "$dir/$run_name.log" || rc=1; fi
  record inductor_settings "$(outcome $rc)" "$(took)" "$dir/$run_name.json"
}

check_meta_init() {
  local out=$work/meta_init dir=$raw/meta_init_$gpu/$run_name rc
  run "$work/meta_init.log" "${NOCC[@]}" timeout 600 python3 benchmarks/inductor_settings.py --train "$TRAIN" --out_dir "$out" \
      --variant device= --variant meta= --variant_flags meta=--init=meta --rounds 2 --steps 25 --warmup 5
  rc=$?
  if [[ $dry == 1 ]]; then echo "+ cp $out/results.json $dir/init_ab.json"
  else mkdir -p "$dir" && cp "$out/results.json" "$dir/init_ab.json" && cp "$work/meta_init.log" "$dir/init_ab.log" || rc=1; fi
  record meta_init "$(outcome $rc)" "$(took)" "$dir/init_ab.json"
}

check_cpu_offload() {
  local dir=$raw/small_$gpu/$run_name rc=0 v
  for v in device offload; do
    local extra=()
    [[ $v == offload ]] && extra=(--cpu_offload)
    train "$dir/small_$v.log" "$dir/small_$v.json" "${SMALL[@]}" --steps=20 --untimed_steps=5 --backend=nccl_stream \
        "${extra[@]}" --out_dir="$work/cpu_offload/$v" --dump_graph="$dir/small_$v.mir" \
        --calibration_out="$dir/small_$v.calibration.csv" || rc=1
  done
  record cpu_offload "$(outcome $rc)" "$(took)" "$dir/small_{device,offload}.json"
}

check_gemm_workspace() {
  local dir=$raw/gemm_workspace_$gpu/$run_name rc=0
  small() {  # small NAME BACKEND [train flags...]
    local name=$1 backend=$2
    shift 2
    train "$dir/small_$name.log" "$dir/small_$name.json" "${SMALL[@]}" --steps=12 --untimed_steps=2 \
        --calibration=none --backend="$backend" --out_dir="$work/gemm_workspace/$name" "$@" || rc=1
  }
  small eager nccl_stream
  small graph 'nccl_stream{cuda_graph=true}'
  small graph_meta 'nccl_stream{cuda_graph=true}' --init=meta
  small offload 'nccl_stream{cuda_graph=true}' --cpu_offload
  train "$dir/1b_inductor.log" "$dir/1b_inductor.json" "${ONE_B[@]}" --steps=15 --untimed_steps=5 \
      '--backend=nccl_stream{cuda_graph=true}' --partition_backends=inductor --out_dir="$work/gemm_workspace/1b" || rc=1
  if [[ $dry == 0 && $rc == 0 ]]; then
    # The prediction is exact where it was measured (docs/benchmarks.md): predicted = held.
    local f
    for f in "$dir"/*.json; do
      [[ $(json "$f" "predicted_library_device_bytes == library_device_bytes") == True ]] || rc=1
    done
  fi
  record gemm_workspace "$(outcome $rc)" "$(took)" "predicted = held GEMM workspaces in every run; $dir"
}

check_calibration() {
  local dir=$raw/calibration_$gpu/$run_name rc=0 budget
  export MAGI_CACHE_DIR=$work/calibration/cache
  [[ $dry == 1 ]] || { rm -rf "$MAGI_CACHE_DIR"; mkdir -p "$MAGI_CACHE_DIR"; }
  one_b() {  # one_b NAME BACKEND [train flags...]
    local name=$1 backend=$2
    shift 2
    train "$dir/1b_$name.log" "$dir/1b_$name.json" "${ONE_B[@]}" --steps=15 --untimed_steps=5 \
        --backend="$backend" --out_dir="$work/calibration/$name" "$@" || rc=1
  }
  one_b graph_first 'nccl_stream{cuda_graph=true}'   # an empty cache: every kernel micro-run
  one_b graph_cached 'nccl_stream{cuda_graph=true}'  # the table the first run wrote
  one_b eager_cached nccl_stream
  if [[ $dry == 1 ]]; then budget=BUDGET
  else budget=$(json "$dir/1b_graph_first.json" "round(0.8 * peak_memory_bytes / 1e9, 2)") || rc=1; fi
  [[ -n $budget ]] && one_b graph_budget80 'nccl_stream{cuda_graph=true}' --memory_budget_gb="$budget"
  if [[ $dry == 1 ]]; then echo "+ cp -r $MAGI_CACHE_DIR $dir/cache"
  else rm -rf "$dir/cache" && cp -r "$MAGI_CACHE_DIR" "$dir/cache" || rc=1; fi
  unset MAGI_CACHE_DIR
  record calibration "$(outcome $rc)" "$(took)" "$dir"
}

check_budget_sweep() {
  # The plans along the memory budget, all from one calibration table: this run's (calibration
  # above), else the newest one kept in the docs, so no run micro-runs the kernels again.
  local dir=$raw/calibration_$gpu/$run_name/budgets rc=0 cache peak f
  cache=$raw/calibration_$gpu/$run_name/cache
  # shellcheck disable=SC2012  # folder names are DATE_COMMIT
  [[ -d $cache ]] || cache=$(ls -d "$raw"/calibration_"$gpu"/*/cache 2>/dev/null | sort | tail -1)
  peak=$(json "$raw/calibration_$gpu/$run_name/1b_graph_first.json" "peak_memory_bytes / 1e9" 2>/dev/null)
  peak=${peak:-26.07}  # the plain CUDA-graph step's measured peak on an H200 (GB)
  export MAGI_CACHE_DIR=$work/budget_sweep/cache
  if [[ $dry == 1 ]]; then echo "+ cp -r ${cache:-(no kept table)} $MAGI_CACHE_DIR"
  else rm -rf "$MAGI_CACHE_DIR"; mkdir -p "$(dirname "$MAGI_CACHE_DIR")"
    if [[ -n $cache ]]; then cp -r "$cache" "$MAGI_CACHE_DIR"; else mkdir -p "$MAGI_CACHE_DIR"; fi
  fi
  for f in 0.9 0.7 0.6 0.5 0.4 0.3; do
    local budget
    budget=$(awk -v f=$f -v p="$peak" 'BEGIN { printf "%.2f", f * p }')
    # A budget nothing fits is an answer, not a failure: the run's log says so.
    train "$dir/1b_budget$f.log" "$dir/1b_budget$f.json" "${ONE_B[@]}" --steps=15 --untimed_steps=5 \
        '--backend=nccl_stream{cuda_graph=true}' --memory_budget_gb="$budget" --out_dir="$work/budget_sweep/$f" ||
      { [[ $dry == 0 ]] && grep -q -i 'nothing fits' "$dir/1b_budget$f.log"; } || rc=1
  done
  unset MAGI_CACHE_DIR
  record budget_sweep "$(outcome $rc)" "$(took)" "$dir (budgets 0.9-0.3 x $peak GB)"
}

check_kernel_profile() {
  local out=$work/kernel_profile dir=$raw/kernels_$gpu/$run_name rc
  run "$work/kernel_profile.log" env TRAIN="$TRAIN" bash benchmarks/kernel_profile.sh "$out" nccl_stream_graph \
      inductor_graph deterministic
  rc=$?
  # kernel_profile.sh goes on past a configuration that failed, and says so.
  if [[ $dry == 0 ]] && grep -q '^kernel_profile.sh: .* failed' "$work/kernel_profile.log"; then rc=1; fi
  if [[ $dry == 1 ]]; then echo "+ cp $out/*.breakdown.{md,json} $dir/"
  else mkdir -p "$dir" && cp "$out"/*.breakdown.md "$out"/*.breakdown.json "$dir/" || rc=1; fi
  record kernel_profile "$(outcome $rc)" "$(took)" "$dir"
}

check_generate_1b() {
  local out=$work/generate_1b dir=$raw/generate_1b_$gpu rc
  # Batches 1/8/32, prompts 16/1,024, 128 tokens: Magi's rows (benchmarks/generate_1b.py's MAGI_RUNS)
  # and PyTorch's, on the weights Magi's first run writes.
  run "$work/generate_1b.log" "${NOCC[@]}" python3 benchmarks/generate_1b.py --generate "$GENERATE" --out_dir "$out"
  rc=$?
  if [[ $dry == 1 ]]; then echo "+ cp $out/results.json $dir/$run_name.json; cp $out/table.md $dir/$run_name.md"
  else
    mkdir -p "$dir" && cp "$out/results.json" "$dir/$run_name.json" && cp "$out/table.md" "$dir/$run_name.md" &&
      cp "$work/generate_1b.log" "$dir/$run_name.log" || rc=1
  fi
  record generate_1b "$(outcome $rc)" "$(took)" "$dir/$run_name.json"
}

# ---------------------------------------------------------------------------------------------

echo "gpu_check: run $run_name on $gpu; raw results under $raw, logs under $work; checks: ${selected[*]}"
[[ ${#selected[@]} -gt 0 ]] || { echo "gpu_check: nothing selected" >&2; exit 2; }
total_start=$SECONDS
needs_binaries=0
for n in "${selected[@]}"; do [[ $n != gpu_tests ]] && needs_binaries=1; done
if [[ $build == 1 && $needs_binaries == 1 ]]; then
  start=$SECONDS
  run "$work/build.log" "${bazel[@]}" build "${bazel_flags[@]}" "${CONFIG[@]}" //examples:train //examples:generate \
      //magi/tools:magi_compare
  rc=$?
  record build "$(outcome $rc)" "$(took)" "//examples:train //examples:generate //magi/tools:magi_compare"
  if [[ $rc != 0 && $dry == 0 ]]; then
    # Without the binaries only the Bazel tests can run.
    if [[ " ${selected[*]} " == *" gpu_tests "* ]]; then selected=(gpu_tests); else selected=(); fi
    echo "gpu_check: the build failed; running: ${selected[*]:-nothing}" >&2
  fi
fi
for n in "${selected[@]}"; do
  echo "== $n ($(kind_of "$n"))"
  start=$SECONDS
  "check_$n"
done

echo
echo "## GPU check $run_name ($gpu)"
echo
summary=$(
  echo "| check | result | time | details |"
  echo "|---|---|---:|---|"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r n r s d <<<"$row"
    printf '| %s | %s | %s s | %s |\n' "$n" "$r" "${s%.*}" "$d"
  done
)
echo "$summary"
echo
total=$((SECONDS - total_start))
echo "gpu_check: ${#ROWS[@]} rows, $failures failed, ${total} s"
if [[ $dry == 0 ]]; then
  mkdir -p "$raw/gpu_check" && printf '%s\n' "$summary" >"$raw/gpu_check/$run_name.md"
fi
[[ $failures == 0 ]]
