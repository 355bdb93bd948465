#!/usr/bin/env bash
# Proves with `bazel query` that no layer depends on a layer above it (docs/architecture.md's
# architecture table):
#
#   ir < analysis < passes, cost < search < compiler < frontends;  backends and runtimes beside
#
# Each check names a set of targets (FROM) and what they must never reach (FORBIDDEN);
# a violation prints the offending dependency chain (`somepath(FROM, target)`).
# Prints every check it makes and exits non-zero if any fails. The last check is about the build
# rather than layers: targets that compile against LibTorch use the torch_cc_* rules.
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
check "ir, analysis, passes, cost, search never depend on runtimes, backends' implementations or frontends" \
  "$LOW" "\$d intersect (//magi/runtime/... + //magi/frontend/... + //magi/compat/... + //magi/backend/interpreter/... + //magi/models/...)"
check "ir never depends on analysis, passes, cost, search or tools" \
  "$(libs "//magi/ir:all")" "\$d intersect (//magi/analysis/... + //magi/passes/... + //magi/cost/... + //magi/search/... + //magi/tools/...)"
check "analysis never depends on passes, cost or search" \
  "$(libs "//magi/analysis/...")" "\$d intersect (//magi/passes/... + //magi/cost/... + //magi/search/...)"
check "cost never depends on passes or search" \
  "$(libs "//magi/cost/...")" "\$d intersect (//magi/passes/... + //magi/search/...)"
check "passes never depend on cost or search (except the auto-recompute registration)" \
  "($(libs "//magi/passes/...") except //magi/passes:auto_recompute_registration except //magi/passes:all_passes)" \
  "\$d intersect (//magi/cost/... + //magi/search/...)"
check "the magi tool never depends on LibTorch, Gloo, CUDA or NCCL" \
  "//magi/tools/..." "filter($DEVICE_LIBS, \$d)"
check "the backend interface never depends on LibTorch" \
  "//magi/backend:backend" "filter($DEVICE_LIBS, \$d)"
check "the kernel calibrator interface (what the compile driver measures through) never depends on LibTorch" \
  "//magi/backend:kernel_calibrator" "filter($DEVICE_LIBS, \$d)"
check "backends never depend on frontends" \
  "//magi/backend/..." "\$d intersect //magi/frontend/..."
# What the NCCL communicator itself needs (deterministic mode's NCCL settings) comes with it.
check "backends reach runtimes only through the NCCL communicator (nccl_stream drives NCCL itself)" \
  "//magi/backend/..." "\$d intersect (//magi/runtime/... except deps(//magi/runtime/nccl:nccl_communicator))"
check "runtimes depend on the backend layer only for the Communicator interface, never on frontends" \
  "//magi/runtime/..." "\$d intersect ((//magi/backend/... except //magi/backend:communicator) + //magi/frontend/...)"
# magi/frontend's two header-level interfaces are what model code implements for every frontend
# (module-path scopes capture records; ResetsParameters, which meta-device materialization calls);
# anything else under magi/frontend is a frontend's internals.
check "models never depend on frontends except the module-path and parameter-initializer interfaces" \
  "//magi/models/..." "\$d intersect (//magi/frontend/... except (//magi/frontend:module_scope + //magi/frontend:reset_parameters))"
check "the compile driver never depends on LibTorch, Gloo, CUDA or NCCL" \
  "$(libs //magi/compiler/...)" "filter($DEVICE_LIBS, \$d)"
check "the compile driver never depends on frontends, runtimes or backend implementations" \
  "$(libs //magi/compiler/...)" "\$d intersect (//magi/frontend/... + //magi/runtime/... + //magi/backend/interpreter/... + //magi/backend/nccl_stream/... + //magi/backend/elementwise/... + //magi/backend/common/...)"

# Not a layer rule, but a bazel query rule of the same kind: every C++ target that compiles
# against LibTorch's headers uses the torch_cc_* rules (third_party/libtorch/torch_cc.bzl), so
# its compiles load <torch/torch.h> precompiled; a plain cc_ rule would parse it again, ~25 s
# per translation unit.
checked=$((checked + 1))
plain=$(query "kind('cc_(library|test|binary) rule', rdeps(//..., @libtorch//:headers)) except rdeps(//..., //third_party/libtorch:torch_pch, 1) except @libtorch//...")
if [[ -z "$plain" ]]; then
  echo "PASS  C++ targets that compile against LibTorch use the torch_cc_* rules"
else
  failed=$((failed + 1))
  echo "FAIL  C++ targets that compile against LibTorch use the torch_cc_* rules; these do not:"
  sed 's/^/        /' <<<"$plain"
fi

echo "check_layering: $checked checks, $((checked - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
