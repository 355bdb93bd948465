#!/usr/bin/env bash
# shellcheck disable=SC2016  # the patterns match a literal $BAZEL
# tools/gpu_check.sh without a GPU: its options, its selection of checks and the commands its
# dry run prints (the GPU run itself happens on the GPU machine only).
set -uo pipefail
script=tools/gpu_check.sh
failures=0
expect() {  # expect WHAT PATTERN TEXT
  if grep -q -E -- "$2" <<<"$3"; then echo "ok: $1"; else echo "FAIL: $1 (no /$2/)"; failures=$((failures + 1)); fi
}
all=$(bash $script --dry-run --run=2026-01-01_0000000 --gpu=h200 2>&1); rc=$?
expect "a dry run exits 0" "^gpu_check: 14 rows, 0 failed" "$all"
[[ $rc == 0 ]] || { echo "FAIL: dry run exit $rc"; failures=$((failures + 1)); }
expect "builds the benchmarks' binaries with CUDA" '^\+ \$BAZEL build \$BAZEL_FLAGS --config=cuda --config=opt //examples:train' "$all"
expect "tests every GPU test" '^\+ \$BAZEL test .*//tests/gpu:nccl_stream_training_test .*//magi/frontend/capture:capture_cuda_test' "$all"
expect "runs the deterministic script" 'BUILD=0 bash tools/deterministic_gpu.sh' "$all"
expect "runs the FSDP2 comparison" 'python3 benchmarks/fsdp_1b.py --train bazel-bin/examples/train .*--magi_runs=10' "$all"
expect "runs the generation benchmark" 'python3 benchmarks/generate_1b.py --generate bazel-bin/examples/generate --out_dir' "$all"
expect "keeps the benchmark's raw results where the docs read them" 'docs/benchmarks/fsdp_1b_h200/2026-01-01_0000000.json' "$all"
expect "ends with one summary table" '^\| check \| result \| time \| details \|$' "$all"
tests=$(bash $script --tests --dry-run --run=r --gpu=h200 2>&1)
expect "--tests runs the tests" '^== gpu_tests' "$tests"
if grep -q '^== fsdp_1b' <<<"$tests"; then echo "FAIL: --tests ran a benchmark"; failures=$((failures + 1)); fi
bench=$(bash $script --benchmarks --dry-run --run=r --gpu=h200 2>&1)
expect "--benchmarks runs the benchmarks" '^== fsdp_1b' "$bench"
if grep -q '^== gpu_tests' <<<"$bench"; then echo "FAIL: --benchmarks ran a test"; failures=$((failures + 1)); fi
only=$(bash $script --only=cpu_offload --dry-run --run=r --gpu=h200 2>&1)
expect "--only runs that check alone" 'checks: cpu_offload$' "$only"
bad=$(bash $script --only=nonesuch --dry-run 2>&1); rc=$?
expect "an unknown check is named" "no check 'nonesuch'" "$bad"
[[ $rc == 2 ]] || { echo "FAIL: --only=nonesuch exit $rc, not 2"; failures=$((failures + 1)); }
bad=$(bash $script --frobnicate 2>&1); rc=$?
expect "an unknown option is refused" "unknown argument '--frobnicate'" "$bad"
[[ $rc == 2 ]] || { echo "FAIL: --frobnicate exit $rc, not 2"; failures=$((failures + 1)); }
expect "--list lists every check" 'kernel_profile +benchmark' "$(bash $script --list)"
echo "$failures failure(s)"
[[ $failures == 0 ]]
