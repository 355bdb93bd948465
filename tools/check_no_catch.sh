#!/usr/bin/env bash
# Fails when C++ under magi/ or examples/ has a `catch` outside magi/compat: LibTorch's (and
# Gloo's, iostreams') exceptions become absl::Status at one boundary, magi/compat/torch_status.h
# (compat::CallTorch and its kin), and everywhere else a catch is a smell (docs/architecture.md).
# tools/check_layering.sh runs it (CI's 1.13 leg); tools:check_no_catch_test tests it.
#
#   tools/check_no_catch.sh          # the workspace this script is in
#   tools/check_no_catch.sh ROOT     # another tree (the test's fixtures)
#
# Prints PASS, or FAIL with each offending line; exits 1 on a violation, 2 on bad usage.
set -uo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
[[ -d "$root" ]] || { echo "check_no_catch: no such folder: $root" >&2; exit 2; }

# Files outside magi/compat that may keep a catch: "path  # why it cannot go through
# CallTorch" (a destructor that must not throw, a test of an exception's own type). None
# today.
readonly ALLOWED=(
)

cd "$root" || exit 2
dirs=()
for d in magi examples; do [[ -d $d ]] && dirs+=("$d"); done
[[ ${#dirs[@]} -gt 0 ]] || { echo "check_no_catch: $root has neither magi/ nor examples/" >&2; exit 2; }

hits=$(grep -rnE --include='*.cc' --include='*.h' --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' \
  '(^|[^[:alnum:]_])catch[[:space:]]*\(' "${dirs[@]}" | grep -v '^magi/compat/' || true)
for entry in "${ALLOWED[@]}"; do
  path=${entry%%[[:space:]]*}
  hits=$(grep -v "^$path:" <<<"$hits" || true)
done

if [[ -n "$hits" ]]; then
  echo "FAIL  no catch outside magi/compat (call through compat::CallTorch, magi/compat/torch_status.h):"
  sed 's/^/        /' <<<"$hits"
  exit 1
fi
echo "PASS  no catch outside magi/compat (C++ under magi/ and examples/)"
