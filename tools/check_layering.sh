#!/usr/bin/env bash
# Proves with `bazel query` that no layer depends on a layer above it (docs/architecture.md's
# architecture table):
#
#   ir < analysis < passes, cost < search < compiler < training < frontends
#   ir < comm < backends, runtimes (beside each other) < training < frontends
#   backends < calibration (the LibTorch kernel calibrator) < training
#   module_api < models, frontends;  frontend/common < capture < fsdp;  frontend/common < fx
#
# Each check names a set of targets (FROM) and what they must never reach (FORBIDDEN);
# a violation prints the offending dependency chain (`somepath(FROM, target)`).
# Prints every check it makes and exits non-zero if any fails. The last two checks are about the
# code rather than layers: targets that compile against LibTorch use the torch_cc_* rules, and no
# C++ outside magi/compat catches an exception (tools/check_no_catch.sh).
#
#   tools/check_layering.sh            # from the workspace root
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BAZEL=${BAZEL:-tools/bazel}
failed=0
checked=0
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT

query() {  # query EXPR: prints the labels, one per line; exits the script on a query error
  local out rc=0
  out=$("$BAZEL" query --noshow_progress --output=label "$1" 2>"$errors") || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "check_layering: bazel query failed (exit $rc) on: $1" >&2
    cat "$errors" >&2
    exit 2
  fi
  printf '%s' "$out"
}

# LibTorch and the device libraries it brings (Gloo, CUDA, NCCL), as external repositories.
readonly DEVICE_LIBS='"^@(libtorch|gloo|local_cuda|local_nccl)//"'

# check NAME FROM FORBIDDEN: FORBIDDEN is a query expression over $d, the deps of FROM.
check() {
  local name=$1 from=$2 forbidden=$3
  checked=$((checked + 1))
  local offenders
  # Rules first (a label that names a rule reads better than one of its headers).
  offenders=$(query "let d = deps($from) in kind(rule, $forbidden)")
  [[ -z "$offenders" ]] && offenders=$(query "let d = deps($from) in $forbidden")
  if [[ -z "$offenders" ]]; then
    echo "PASS  $name"
    return
  fi
  failed=$((failed + 1))
  local first
  first=$(head -n 1 <<<"$offenders")
  echo "FAIL  $name"
  echo "      $(wc -l <<<"$offenders") forbidden rule(s) reached, e.g. $first; somepath($from, $first):"
  query "somepath($from, $first)" | sed 's/^/        /'
  echo
}

# Targets of a package tree without its tests (tests may link anything to set up inputs).
libs() { echo "($1 except tests($1))"; }

LOW="//magi/ir/... + //magi/analysis/... + //magi/passes/... + //magi/cost/... + //magi/search/..."

echo "check_layering: layers must not depend on layers above them"
check "ir, analysis, passes, cost, search never depend on LibTorch, Gloo, CUDA or NCCL" \
  "$LOW" "filter($DEVICE_LIBS, \$d)"
check "ir, analysis, passes, cost, search never depend on communicators, runtimes, backends' implementations or frontends" \
  "$LOW" "\$d intersect (//magi/comm/... + //magi/runtime/... + //magi/training/... + //magi/frontend/... + //magi/module_api/... + //magi/compat/... + //magi/backend/interpreter/... + //magi/calibration/... + //magi/models/...)"
# magi/ir/... includes the fuzz targets' build-time seeds (genrules and the tools they run).
check "ir never depends on analysis, passes, cost, search, the compile driver, backends or tools" \
  "$(libs "//magi/ir/...")" "\$d intersect (//magi/analysis/... + //magi/passes/... + //magi/cost/... + //magi/search/... + //magi/compiler/... + //magi/backend/... + //magi/tools/... + //tools/...)"
check "analysis never depends on passes, cost or search" \
  "$(libs "//magi/analysis/...")" "\$d intersect (//magi/passes/... + //magi/cost/... + //magi/search/...)"
check "cost never depends on passes or search" \
  "$(libs "//magi/cost/...")" "\$d intersect (//magi/passes/... + //magi/search/...)"
# auto-recompute ranks with NodeCostOracle; its registration, which builds a CostModel, is in
# magi/search (//magi/search:auto_recompute_registration).
check "passes never depend on cost or search" \
  "$(libs "//magi/passes/...")" "\$d intersect (//magi/cost/... + //magi/search/...)"
check "the magi tool never depends on LibTorch, Gloo, CUDA or NCCL" \
  "//magi/tools/..." "filter($DEVICE_LIBS, \$d)"
check "the backend interface never depends on LibTorch" \
  "//magi/backend:backend" "filter($DEVICE_LIBS, \$d)"
check "the kernel calibrator interface (what the compile driver measures through) never depends on LibTorch" \
  "//magi/backend:kernel_calibrator" "filter($DEVICE_LIBS, \$d)"
# The calibrator serves CUDA and both frontends through magi/training; it may use the backend
# interfaces and the interpreter, runtimes' interfaces (comm), compat, ir, analysis and cost.
check "calibration never depends on frontends, the training runtime, models or the compile driver" \
  "$(libs "//magi/calibration/...")" "\$d intersect (//magi/frontend/... + //magi/training/... + //magi/models/... + //magi/compiler/...)"
check "the communicator layer never depends on backends, runtimes, frontends or models" \
  "//magi/comm/..." "\$d intersect (//magi/backend/... + //magi/runtime/... + //magi/frontend/... + //magi/models/...)"
check "backends never depend on runtimes or frontends (the Communicator interface is in magi/comm)" \
  "//magi/backend/..." "\$d intersect (//magi/runtime/... + //magi/frontend/...)"
check "runtimes never depend on backends or frontends" \
  "//magi/runtime/..." "\$d intersect (//magi/backend/... + //magi/frontend/...)"
# What model code implements for every frontend (module-path scopes, ResetsParameters) is
# magi/module_api, below both.
check "the module API never depends on LibTorch, frontends or models" \
  "//magi/module_api/..." "filter($DEVICE_LIBS, \$d) + (\$d intersect (//magi/frontend/... + //magi/models/...))"
check "models never depend on frontends" \
  "//magi/models/..." "\$d intersect //magi/frontend/..."
# The two frontends: capture (magi/frontend/capture, and the FSDP API over it in
# magi/frontend/fsdp) and FX (magi/frontend/fx). What they share is below them:
# magi/frontend/common (ATen arguments, functional variants) and magi/training (the trainer
# core, checkpoints, step inputs, calibration glue, the plan check).
check "the training runtime never depends on frontends or models" \
  "//magi/training/..." "\$d intersect (//magi/frontend/... + //magi/models/...)"
check "the frontends' common code never depends on a frontend" \
  "//magi/frontend/common/..." "\$d intersect (//magi/frontend/capture/... + //magi/frontend/fsdp/... + //magi/frontend/fx/...)"
check "the FX frontend never depends on the capture frontend or FSDP" \
  "//magi/frontend/fx/..." "\$d intersect (//magi/frontend/capture/... + //magi/frontend/fsdp/...)"
check "the capture frontend and FSDP never depend on the FX frontend" \
  "//magi/frontend/capture/... + //magi/frontend/fsdp/..." "\$d intersect //magi/frontend/fx/..."
check "the capture frontend never depends on FSDP" \
  "//magi/frontend/capture/..." "\$d intersect //magi/frontend/fsdp/..."
check "the compile driver never depends on LibTorch, Gloo, CUDA or NCCL" \
  "$(libs //magi/compiler/...)" "filter($DEVICE_LIBS, \$d)"
check "the compile driver never depends on frontends, the training runtime, runtimes or backend implementations" \
  "$(libs //magi/compiler/...)" "\$d intersect (//magi/frontend/... + //magi/training/... + //magi/runtime/... + //magi/backend/interpreter/... + //magi/backend/nccl_stream/... + //magi/backend/elementwise/... + //magi/backend/common/... + //magi/calibration/...)"

# Not a layer rule, but a bazel query rule of the same kind: every C++ target that compiles
# against LibTorch's headers uses the torch_cc_* rules (third_party/libtorch/torch_cc.bzl), so
# its compiles load <torch/torch.h> or <ATen/ATen.h> precompiled; a plain cc_ rule would parse
# them again, ~25 s per translation unit.
checked=$((checked + 1))
plain=$(query "kind('cc_(library|test|binary) rule', rdeps(//..., @libtorch//:headers)) except rdeps(//..., //third_party/libtorch:torch_pch + //third_party/libtorch:aten_pch, 1) except @libtorch//...")
if [[ -z "$plain" ]]; then
  echo "PASS  C++ targets that compile against LibTorch use the torch_cc_* rules"
else
  failed=$((failed + 1))
  echo "FAIL  C++ targets that compile against LibTorch use the torch_cc_* rules; these do not:"
  sed 's/^/        /' <<<"$plain"
fi

# Not a layer rule either: LibTorch's exceptions become Status at one boundary
# (magi/compat/torch_status.h); a `catch` anywhere else in magi/ or examples/ fails.
checked=$((checked + 1))
if ! bash tools/check_no_catch.sh; then
  failed=$((failed + 1))
fi

echo "check_layering: $checked checks, $((checked - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
