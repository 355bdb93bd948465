#!/usr/bin/env bash
# examples:generate as a user runs it (random tiny weights, no checkpoint): bad flags are
# clear errors; --top_k=1 is greedy; a sampling seed reproduces its text and another seed
# changes it; a generation longer than the window re-prefills and says so; the tokens/s,
# planned-peak and progress lines are printed; 2 ranks give the bytes of 1.
# (examples/generation_test.cc compares the KV cache with full recomputation.)
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/generate"
mkdir -p "$out"
# --help prints what the program does and its own flags, and exits 0.
examples/generate --help > "$out/help.txt"
grep -q "^Continues a prompt" "$out/help.txt" && grep -q "^  --top_k  " "$out/help.txt" || { cat "$out/help.txt"; exit 1; }
gen() { examples/generate --checkpoint_dir= --world_size=1 --seq_len=32 --length=48 --prompt="Sonnet" "$@"; }

expect_error() {  # expect_error MESSAGE FLAGS...: the run fails and stderr has MESSAGE
  local message=$1
  shift
  if gen "$@" > /dev/null 2> "$out/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -qF -- "$message" "$out/err.txt" || { echo "for $*: expected '$message', got:"; cat "$out/err.txt"; exit 1; }
}
expect_error "error: --temperature must be a finite number >= 0 (0: greedy), not nan" --temperature=nan
expect_error "error: --temperature must be a finite number >= 0 (0: greedy), not inf" --temperature=inf
expect_error "error: --temperature must be a finite number >= 0 (0: greedy), not -0.5" --temperature=-0.5
expect_error "error: --top_k must be >= 0 (0: no limit), not -2" --top_k=-2
expect_error "error: --top_k=300 is more than the vocabulary (256 tokens)" --top_k=300
expect_error "error: --progress_s must be a finite number >= 0 (0: none), not nan" --progress_s=nan
expect_error "error: --length must be >= 0, not -1" --length=-1
expect_error "error: --seq_len must be >= 2, not 1" --seq_len=1
expect_error "error: --prompt is empty (there is nothing to continue)" --prompt=
expect_error "error: --overflow_keep must be in [1, 31] (less than --seq_len) or 0 (half of it), not 32" --overflow_keep=32
expect_error "Illegal value 'x' specified for flag 'temperature'" --temperature=x

# Greedy, and sampling with top_k=1 (the same bytes).
gen > "$out/greedy.txt" 2> "$out/greedy.log"
gen --temperature=0.7 --top_k=1 > "$out/top1.txt" 2> /dev/null
cmp "$out/greedy.txt" "$out/top1.txt"
[[ $(head -c 6 "$out/greedy.txt") == "Sonnet" && $(wc -c < "$out/greedy.txt") -eq 55 ]]
# Every line the run promises.
grep -q '^magi: generated 1 x 48 bytes in .* bytes/s; .* forwards of 1 sequences, KV cache)' "$out/greedy.log"
grep -q '^magi: prefill: [0-9]* runs, [0-9]* sequences ([1-9][0-9]* after a context overflow), .* bytes/s' "$out/greedy.log"
grep -q '^magi: decode: [0-9]* steps of 1 sequences, [0-9]* bytes in .* bytes/s' "$out/greedy.log"
grep -q '^magi: KV cache 32768 bytes per rank (2 layers x K,V \[1, 4, 32, 16\]); decode step planned peak [0-9]* bytes with the cache donated (updated in place), [0-9]* without' "$out/greedy.log"
# The reference path runs too.
gen --kv_cache=false > /dev/null 2> "$out/recompute.log"
grep -q '^magi: full recompute: 48 forwards of 1 x 32 positions, 48 bytes in .* bytes/s' "$out/recompute.log"

# A seed reproduces its sample; another seed gives another.
gen --temperature=1.5 --top_k=40 --seed=5 > "$out/seed5a.txt" 2> /dev/null
gen --temperature=1.5 --top_k=40 --seed=5 > "$out/seed5b.txt" 2> /dev/null
gen --temperature=1.5 --top_k=40 --seed=6 > "$out/seed6.txt" 2> /dev/null
cmp "$out/seed5a.txt" "$out/seed5b.txt"
if cmp -s "$out/seed5a.txt" "$out/seed6.txt"; then echo "seeds 5 and 6 sampled the same text"; exit 1; fi

# Progress lines, and 2 ranks give the bytes of 1.
gen --world_size=2 --progress_s=0.000001 > "$out/two.txt" 2> "$out/two.log"
grep -q '^magi: progress [0-9]*/48 bytes' "$out/two.log" || { cat "$out/two.log"; exit 1; }
cmp "$out/greedy.txt" "$out/two.txt"
echo "generate example ok"
