#!/usr/bin/env bash
# Runs examples:train as a user would (2 local processes, a few steps) and checks what it
# promises: a falling loss, the summary JSON fields, the loss curve files, one checkpoint
# shard per rank, and a clear error for a bad flag.
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/train"
examples/train --steps=12 --world_size=2 --out_dir="$out" --summary_json="$out/summary_copy.json"
for f in loss.csv loss.svg summary.json summary_copy.json checkpoint/rank0.pt checkpoint/rank1.pt; do
  [[ -s "$out/$f" ]] || { echo "missing $out/$f"; exit 1; }
done
python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for key in ["initial_loss", "final_loss", "steps", "world_size", "tokens_per_s", "peak_memory_bytes"]:
    assert key in s, key
assert s["steps"] == 12 and s["world_size"] == 2, s
assert s["final_loss"] < s["initial_loss"] - 1.0, s   # from ~5.5 (uniform over 256 bytes)
assert s["peak_memory_bytes"] > 0 and s["tokens_per_s"] > 0, s
print("summary ok:", s)
PY
[[ $(wc -l < "$out/loss.csv") -eq 13 ]] || { echo "loss.csv should have a header and 12 rows"; exit 1; }
grep -q "<path d=\"M" "$out/loss.svg"
if examples/train --model=huge --world_size=1 --out_dir="$out/bad" 2> "$out/err.txt"; then
  echo "a bad --model should fail"; exit 1
fi
grep -q "unknown --model=huge (tiny, small or 1b)" "$out/err.txt"
# A run resumed from its checkpoint continues bitwise: 3 + 3 steps == 6 steps.
examples/train --steps=6 --world_size=2 --out_dir="$out/straight"
examples/train --steps=3 --world_size=2 --out_dir="$out/resumed"
examples/train --steps=6 --world_size=2 --out_dir="$out/resumed" --resume
cmp "$out/straight/checkpoint/rank0.pt" "$out/resumed/checkpoint/rank0.pt"
cmp "$out/straight/checkpoint/rank1.pt" "$out/resumed/checkpoint/rank1.pt"
[[ "$(tail -n 1 "$out/straight/loss.csv")" == "$(tail -n 1 "$out/resumed/loss.csv")" ]]
if examples/train --steps=6 --world_size=1 --out_dir="$out/resumed" --resume 2> "$out/err2.txt"; then
  echo "resuming a 2-rank checkpoint on 1 rank should fail"; exit 1
fi
grep -q "does not match this run's shard" "$out/err2.txt"
# The inference example continues a prompt with the trained shards (full-graph inference path).
examples/generate --world_size=2 --checkpoint_dir="$out/straight/checkpoint" --length=40 --prompt="Sonnet" > "$out/gen.txt"
[[ $(wc -c < "$out/gen.txt") -ge 46 ]] || { echo "generated too little: $(cat "$out/gen.txt")"; exit 1; }
head -c 6 "$out/gen.txt" | grep -q "^Sonnet"
if examples/generate --world_size=1 --checkpoint_dir="$out/straight/checkpoint" --length=5 2> "$out/err3.txt"; then
  echo "a 2-shard checkpoint on 1 rank should fail"; exit 1
fi
grep -q "does not match this run's shard" "$out/err3.txt"
# Without a checkpoint the output folder (nested, new) is still made and written.
examples/train --steps=2 --world_size=1 --checkpoint=false --out_dir="$out/new/nested" > /dev/null
[[ -s "$out/new/nested/summary.json" && ! -e "$out/new/nested/checkpoint" ]]
echo "train example ok"
