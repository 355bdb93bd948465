#!/usr/bin/env bash
# tools/doc_tables.py's own tests, then the check of the repository's docs: every table has a
# source, every table rendered from checked-in raw output is what that output renders to, and
# the tables of predictions (the blog's magi runs, docs/fsdp.md's planned peaks of the 8B step)
# are what their commands print with this build.
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
/usr/bin/python3 tools/doc_tables_test.py
exec /usr/bin/python3 tools/doc_tables.py check \
  --run=plan-sweep-llama4 --run=simulate-llama4-overlap \
  --run=donation-8b-planned-peak --run=reshard-k-8b-planned-peak --run=cpu-offload-8b-planned-peak \
  --replace=bazel-bin/magi/tools/magi=magi/tools/magi \
  --replace=bazel-bin/magi/benchmarks/step_memory_report=magi/benchmarks/step_memory_report \
  --replace=docs/blog/figures/plan_sweep_llama4.svg="$TMPDIR/plan_sweep_llama4.svg"
