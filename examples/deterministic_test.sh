#!/usr/bin/env bash
# Deterministic mode end to end, as a user runs it (docs/deterministic.md): two 20-step
# trainings on 2 Gloo ranks are bitwise identical (losses, final parameters, checkpoints)
# and print the same plan hash; the plan can be pinned; greedy generation of 8 prompts one
# by one and batched gives identical bytes and bitwise-identical logits.
set -euo pipefail
libtorch=${1#--libtorch=}
out="${TEST_TMPDIR:-$(mktemp -d)}/deterministic"
mkdir -p "$out"
MAGI=magi/tools/magi
COMPARE_CHECKPOINTS=magi/training/compare_checkpoints

train() {  # train NAME FLAGS...: 20 steps on 2 ranks into $out/NAME, log in $out/NAME.log
  local name=$1
  shift
  examples/train --steps=20 --world_size=2 --out_dir="$out/$name" --dump_dir="$out/$name" "$@" 2> "$out/$name.log"
}
plan_of() { grep -o 'magi: plan [0-9a-f]*' "$out/$1.log" | cut -d' ' -f3; }

train det1 --deterministic
train det2 --deterministic
grep -q '^magi: deterministic mode: aten deterministic (errors)' "$out/det1.log"
grep -q 'per step (the same on all 2 ranks)' "$out/det1.log"
[[ -n "$(plan_of det1)" && "$(plan_of det1)" == "$(plan_of det2)" ]] || { echo "plan hashes differ"; exit 1; }
for f in losses final_weights; do
  $MAGI compare "$out/det1/$f" "$out/det2/$f" | tee "$out/cmp_$f.txt"
  grep -q '^identical: ' "$out/cmp_$f.txt"
done
$COMPARE_CHECKPOINTS "$out/det1/checkpoint" "$out/det2/checkpoint" | tee "$out/cmp_ckpt.txt"
# Per rank: the newest committed step's shards, moments, buffers and generator state.
[[ $(grep -c ': identical: 67 tensors' "$out/cmp_ckpt.txt") -eq 2 ]]

# The comparers do see differences: a run one step shorter.
examples/train --steps=19 --world_size=2 --out_dir="$out/short" --dump_dir="$out/short" --deterministic 2> /dev/null
rc=0
$COMPARE_CHECKPOINTS "$out/det1/checkpoint" "$out/short/checkpoint" > "$out/cmp_short.txt" || rc=$?
[[ $rc -eq 3 ]] || { echo "compare_checkpoints should exit 3 on different checkpoints, not $rc"; exit 1; }
grep -q "first difference: tensor '" "$out/cmp_short.txt"
rc=0
$MAGI compare "$out/det1/final_weights" "$out/short/final_weights" > "$out/cmp_short_weights.txt" || rc=$?
[[ $rc -eq 3 ]] && grep -q "first difference: tensor '.*' (float32\[.*\]) element \[" "$out/cmp_short_weights.txt"

# On the CPU the plain mode is reproducible too (docs/deterministic.md says why): same bits.
train plain
$MAGI compare "$out/det1/losses" "$out/plain/losses" | grep -q '^identical: '
[[ "$(plan_of plain)" != "$(plan_of det1)" ]]  # the mode is part of the plan

# Pinning the plan: the hash of run 1 passes, another fails naming both.
examples/train --steps=2 --world_size=2 --out_dir="$out/pinned" --deterministic --plan_hash="$(plan_of det1)" 2> /dev/null
if examples/train --steps=2 --world_size=2 --out_dir="$out/wrong" --deterministic --plan_hash=0123456789abcdef \
    2> "$out/wrong.log"; then
  echo "a wrong --plan_hash should fail"; exit 1
fi
grep -q "is $(plan_of det1), not the expected 0123456789abcdef" "$out/wrong.log"

# Batch-invariant greedy generation: 8 prompts one by one, all together, and 3 at a time.
printf 'Sonnet 1\\n\nShall I compare thee\nWhen forty winters\nLook in thy glass\nUnthrifty loveliness\nThose hours, that with gentle work\nThen let not winter\nLo! in the orient\n' > "$out/prompts.txt"
for b in 1 8 3; do
  examples/generate --deterministic --world_size=2 --checkpoint_dir="$out/det1/checkpoint" \
    --prompts_file="$out/prompts.txt" --batch_size=$b --length=24 --logits_out="$out/gen_b$b" \
    > "$out/gen_b$b.txt" 2> "$out/gen_b$b.log"
done
[[ $(grep -c '^----$' "$out/gen_b1.txt") -eq 8 ]]
for b in 8 3; do
  cmp "$out/gen_b1.txt" "$out/gen_b$b.txt"
  $MAGI compare "$out/gen_b1" "$out/gen_b$b" | tee "$out/cmp_gen_b$b.txt"
  grep -q '^identical: 16 tensors' "$out/cmp_gen_b$b.txt"
done
grep -q 'batch-invariant: unrolled' "$out/gen_b8.log"  # the CPU's default

# The same with --invariant_batch=8 (the GPU's default): every graph 8 rows and batched at that
# shape, each prompt in row 0 when alone and in row b of the batch of 8. Bitwise the same where
# the CPU kernels compute every row alike at those shapes (docs/deterministic.md): PyTorch 2.x's
# do for the tiny model; Debian's LibTorch 1.13 (a generic BLAS) rounds the rows of a prefill GEMM
# differently by their position, so there the prefill stays unrolled (--unrolled_prefill) and
# the decode step (8-row GEMMs, position-independent there too) stays batched.
fixed_flags=()
[[ $libtorch == 1.* ]] && fixed_flags=(--unrolled_prefill)
for b in 1 8 3; do
  examples/generate --deterministic --invariant_batch=8 "${fixed_flags[@]}" --world_size=2 --checkpoint_dir="$out/det1/checkpoint" \
    --prompts_file="$out/prompts.txt" --batch_size=$b --length=24 --logits_out="$out/fixed_b$b" \
    > "$out/fixed_b$b.txt" 2> "$out/fixed_b$b.log"
done
grep -qE 'batch-invariant: 8 rows, (prefill unrolled, )?batched' "$out/fixed_b1.log"
for b in 8 3; do
  cmp "$out/fixed_b1.txt" "$out/fixed_b$b.txt"
  $MAGI compare "$out/fixed_b1" "$out/fixed_b$b" | tee "$out/cmp_fixed_b$b.txt"
  grep -q '^identical: 16 tensors' "$out/cmp_fixed_b$b.txt"
done
# A batch that does not fit the fixed rows is refused, naming both flags.
if examples/generate --deterministic --invariant_batch=2 --prompts_file="$out/prompts.txt" --batch_size=3 \
    --length=2 > /dev/null 2> "$out/too_big.log"; then
  echo "--batch_size=3 with --invariant_batch=2 should fail"; exit 1
fi
grep -q -- '--batch_size=3 does not fit --invariant_batch=2 rows' "$out/too_big.log"
echo "deterministic example ok"
