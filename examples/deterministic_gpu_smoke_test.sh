#!/usr/bin/env bash
# tools/deterministic_gpu.sh on the CPU with the tiny model (SMOKE=1): the GPU script's checks,
# comparisons and table work, so a GPU session does not find it broken. The speed numbers
# here mean nothing; the bitwise checks must pass.
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/det_gpu"
OUT_DIR="$out" SMOKE=1 BUILD=0 TRAIN=examples/train GENERATE=examples/generate COMPARE=magi/tools/magi_compare \
  bash tools/deterministic_gpu.sh | tee "$out.txt"
for expected in "PASS training: two deterministic runs, bitwise-identical losses" \
    "PASS training: two deterministic runs, bitwise-identical final_weights" "PASS training: one plan hash" \
    "PASS generation: deterministic, batched bytes = one by one" \
    "PASS generation: deterministic, batched logits bitwise = one by one" \
    "PASS generation: deterministic, prefill unrolled, batched logits bitwise = one by one" \
    "| training, 953M step, tokens/s |" "| batched inference (8 prompts, batch 8; unrolled), tokens/s |" \
    "| batched inference, prefill unrolled (--unrolled_prefill), tokens/s |" \
    "| batched inference, unrolled (--invariant_batch=0), tokens/s |" \
    "0 bitwise check(s) failed"; do
  grep -qF "$expected" "$out.txt" || { echo "missing: $expected"; exit 1; }
done
if grep -q '| nan |' "$out.txt"; then echo "a rate was not measured"; exit 1; fi
echo "deterministic_gpu.sh smoke ok"
