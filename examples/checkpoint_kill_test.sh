#!/usr/bin/env bash
# examples:train's committed-step checkpoints as a user meets them (issue 14, item 1): runs
# killed while they save, the issue's reproduction, and the refusals. Reference: a 6-step run
# never killed (bitwise resume makes every path below end with its step-6 files).
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/train_kill"
mkdir -p "$out"
examples/train --steps=6 --world_size=2 --out_dir="$out/straight"

# Issue 14, item 1, as a user meets it: the run is killed (SIGKILL, both ranks) while it saves,
# at the Nth create/write/fsync/rename/remove of its saves (magi/base/crash_points.h; N picks a
# write of the first save, an fsync of the second, the rename that commits it, and the pruning of
# step 2 in the third). The last committed step stays loadable: the run resumed from it (or
# started anew when nothing was committed) ends with a step 6 identical to the run never killed,
# and no temporary or uncommitted step is left.
for n in 5 14 25 44; do
  K="$out/killed$n"
  if MAGI_CRASH_AT=$n examples/train --steps=6 --world_size=2 --checkpoint_every=2 --out_dir="$K" 2> "$K.txt"; then
    echo "crash point $n was not reached"; exit 1
  fi
  grep -q "magi: crash point $n (.*): SIGKILL" "$K.txt"
  if ls "$K"/checkpoint/step-*/manifest.json > /dev/null 2>&1; then resume=--resume; else resume=; fi
  examples/train --steps=6 --world_size=2 --checkpoint_every=2 --out_dir="$K" $resume
  for f in rank0.pt rank1.pt manifest.json; do
    cmp "$out/straight/checkpoint/step-00000006/$f" "$K/checkpoint/step-00000006/$f"
  done
  [[ "$(cd "$K/checkpoint" && find . | sort | tr '\n' ' ')" == ". ./step-00000004 ./step-00000004/manifest.json ./step-00000004/rank0.pt ./step-00000004/rank1.pt ./step-00000006 ./step-00000006/manifest.json ./step-00000006/rank0.pt ./step-00000006/rank1.pt " ]] \
    || { echo "after crash point $n: $(cd "$K/checkpoint" && find . | sort)"; exit 1; }
done
# A run without --resume does not write into an earlier run's checkpoints; bad retention flags
# are refused.
if examples/train --steps=2 --world_size=2 --out_dir="$out/killed5" 2> "$out/err5.txt"; then
  echo "a fresh run into an earlier run's checkpoints should fail"; exit 1
fi
grep -q "$out/killed5/checkpoint/step-00000006 is a committed checkpoint of an earlier run (step 6): pass --resume" "$out/err5.txt"
if examples/train --steps=2 --world_size=1 --keep_checkpoints=-1 --out_dir="$out/bad" 2> "$out/err5.txt"; then
  echo "--keep_checkpoints=-1 should fail"; exit 1
fi
grep -q "keep_checkpoints must be >= 0" "$out/err5.txt"

# Issue 14, item 1, the reproduction as filed. Its first cp finds no rank file at the top of
# checkpoint/ any more (each committed step is a folder) and the empty file it copies there
# is not part of any step: the run ends at a committed step 8 whose ranks agree, identical to
# an uninterrupted 8-step run.
T=examples/train; D="$out/issue14"; mkdir -p "$D"; K=$(mktemp)
set +e
$T --steps=5 --out_dir=$D; cp $D/checkpoint/rank1.pt $K; $T --steps=6 --resume --out_dir=$D; cp $K $D/checkpoint/rank1.pt; $T --steps=8 --resume --out_dir=$D
set -e
examples/train --steps=8 --world_size=2 --out_dir="$out/straight8"
for f in rank0.pt rank1.pt manifest.json; do
  cmp "$out/straight8/checkpoint/step-00000008/$f" "$D/checkpoint/step-00000008/$f"
done
# What the reproduction did to the old format: rank 1's file of the last step replaced by
# its file of an older step. Both ranks refuse before any training step, and nothing changes.
cp "$D/checkpoint/step-00000006/rank1.pt" "$D/checkpoint/step-00000008/rank1.pt"
before=$(cd "$D" && find . -type f | sort | xargs md5sum)
if $T --steps=10 --resume --out_dir=$D 2> "$out/err4.txt"; then
  echo "a rank file of another step should be refused"; exit 1
fi
grep -q "\[rank 1\] error: $D/checkpoint/step-00000008/rank1.pt does not match the manifest" "$out/err4.txt"
grep -q "\[rank 0\] error: rank 1 could not load its checkpoint from $D/checkpoint" "$out/err4.txt"
if grep -q "^step 9/10" "$out/err4.txt"; then echo "a step ran before the refusal"; exit 1; fi
[[ "$(cd "$D" && find . -type f | sort | xargs md5sum)" == "$before" ]]

echo "checkpoint kill test ok"
