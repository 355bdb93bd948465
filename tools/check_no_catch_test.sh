#!/usr/bin/env bash
# Tests tools/check_no_catch.sh on small trees: a catch outside magi/compat fails (in magi/ and
# in examples/, with or without a space before the parenthesis), one inside magi/compat and a
# word that merely contains "catch" pass.
set -uo pipefail
check=${1:?usage: check_no_catch_test.sh PATH_TO_check_no_catch.sh}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect NAME RC: runs the check on $tmp/NAME and wants exit code RC.
expect() {
  local out rc=0
  out=$(bash "$check" "$tmp/$1" 2>&1) || rc=$?
  if [[ $rc -ne $2 ]]; then
    echo "FAIL $1: exit $rc, want $2; output:"
    echo "$out"
    failed=1
  else
    echo "ok   $1 (exit $rc)"
  fi
}

mkdir -p "$tmp/clean/magi/compat" "$tmp/clean/magi/ir" "$tmp/clean/examples"
printf 'int f() {\n  try { g(); } catch (const std::exception& e) { return 1; }\n  return 0;\n}\n' \
  >"$tmp/clean/magi/compat/torch_status.cc"
printf '// No catch_all( here: a word that merely contains it.\nint no_catch(int x);\nint y = my_catch(1);\n' \
  >"$tmp/clean/magi/ir/graph.cc"
printf 'int main() { return 0; }\n' >"$tmp/clean/examples/train.cc"
expect clean 0

cp -r "$tmp/clean" "$tmp/in_magi"
printf 'void h() {\n  try { g(); } catch (const c10::Error& e) {}\n}\n' >"$tmp/in_magi/magi/ir/bad.cc"
expect in_magi 1

cp -r "$tmp/clean" "$tmp/in_examples"
printf 'void h() {\n  try { g(); } catch(...) {}\n}\n' >"$tmp/in_examples/examples/bad.h"
expect in_examples 1

mkdir -p "$tmp/empty"
expect empty 2

[[ $failed -eq 0 ]] && echo "check_no_catch_test: all passed"
exit $failed
