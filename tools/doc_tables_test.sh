#!/usr/bin/env bash
# tools/doc_tables.py's own tests, then the check of the repository's docs: every table has a
# source, every table rendered from checked-in raw output is what that output renders to, and
# the tables of predictions (the blog's magi runs; docs/fsdp.md's planned peaks of the 8B step)
# are what their commands print with this build. The planned peaks come from a step captured
# with LibTorch, and the docs give 1.13's (Debian's, every developer's default build): under
# another LibTorch the captured step differs, so they are checked on 1.13 builds only.
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
libtorch=""
for arg in "$@"; do
  case "$arg" in
    --libtorch=*) libtorch="${arg#--libtorch=}" ;;
    *) echo "doc_tables_test.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 tools/doc_tables_test.py
runs=(--run=plan-sweep-llama4 --run=simulate-llama4-overlap)
if [[ $libtorch == 1.* ]]; then
  runs+=(--run=donation-8b-planned-peak --run=reshard-k-8b-planned-peak --run=cpu-offload-8b-planned-peak)
else
  # 2.x captures attention fused for a CUDA step (compat/attention.h): 8.7 GB lower, not 1.13's tables.
  echo "doc_tables_test: LibTorch $libtorch: docs/fsdp.md's planned peaks (captured with 1.13, attention written out) not compared"
fi
exec /usr/bin/python3 tools/doc_tables.py check "${runs[@]}" \
  --replace=bazel-bin/magi/tools/magi=magi/tools/magi \
  --replace=bazel-bin/magi/benchmarks/step_memory_report=magi/benchmarks/step_memory_report \
  --replace=docs/blog/figures/plan_sweep_llama4.svg="$TMPDIR/plan_sweep_llama4.svg"
