#!/usr/bin/env bash
# Builds the text-parser fuzz target with clang's libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer and runs it, coverage-guided, for a bounded time.
#
#   magi/ir/fuzz/run_libfuzzer.sh [SECONDS] [CORPUS_DIR]
#
# Under `bazel test` it runs from the runfiles tree (sources are its data); by hand
# it runs from a checkout. Needs clang and libclang-rt-14-dev (tools/bazel installs
# both). A crash or a round-trip violation exits non-zero and leaves the reproducer
# (crash-*) in the working folder of the fuzzer.
set -euo pipefail

seconds="${1:-20}"
root="$(pwd)"
[[ -f "$root/magi/ir/parser.cc" ]] || { echo "run from the repository root (or under bazel test)" >&2; exit 2; }
work="${TEST_TMPDIR:-$(mktemp -d)}/libfuzzer"
corpus="${2:-$work/corpus}"
mkdir -p "$work" "$corpus"
cp "$root"/magi/ir/testdata/*.mir "$corpus/"

clang_bin="$(command -v clang++ || true)"
if [[ -z "$clang_bin" ]]; then
  echo "clang++ is not installed (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

sources=(
  magi/base/check.cc
  magi/ir/attribute.cc magi/ir/collectives.cc magi/ir/ir.cc magi/ir/magi_ops.cc magi/ir/types.cc
  magi/ir/lexer.cc magi/ir/parser.cc magi/ir/printer.cc magi/ir/verifier.cc
  magi/ir/fuzz/text_parser_fuzzer.cc
)
absl_libs=(-labsl_strings -labsl_strings_internal -labsl_str_format_internal -labsl_status -labsl_statusor
           -labsl_raw_hash_set -labsl_hash -labsl_city -labsl_low_level_hash -labsl_throw_delegate
           -labsl_int128 -labsl_raw_logging_internal -labsl_cord -labsl_cord_internal -labsl_cordz_info
           -labsl_cordz_functions -labsl_strerror -labsl_bad_optional_access -labsl_bad_variant_access)

echo "building the libFuzzer target with $clang_bin ..."
(cd "$root" && "$clang_bin" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. "${sources[@]}" "${absl_libs[@]}" -o "$work/text_parser_fuzzer")

echo "fuzzing for ${seconds}s ..."
cd "$work"
"$work/text_parser_fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 "$corpus"
