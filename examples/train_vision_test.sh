#!/usr/bin/env bash
# Runs examples:train_vision as a user would (2 local processes, a short run) and checks what
# it promises: bad flags refused by name before anything starts, the outputs, a held-out test
# accuracy well above chance (10%), and, against PyTorch (tools/train_vision_check.py, under the
# Python of the configured LibTorch): the first 4 steps' losses of both ranks equal PyTorch's
# own training of the same model, init and batches with torch.optim.AdamW (1e-5 for steps 0-1,
# 5e-3 after, as //magi/frontend/fx:fx_training_test), and PyTorch's eval of the final weights
# gives the same test logits and accuracy as Magi's forward graph.
set -euo pipefail
python=/usr/bin/python3
if [[ "${1:-}" == --python=* ]]; then
  python=${1#--python=}
  shift
fi
if [[ -z "$python" || ! -x "$python" ]]; then
  echo "train_vision_test.sh: no Python for the configured LibTorch ('$python'): see docs/torch2.md" >&2
  exit 1
fi
bin=examples/train_vision
tmp="${TEST_TMPDIR:-$(mktemp -d)}/train_vision"
mkdir -p "$tmp"
# --help prints what the program does and its own flags, and exits 0.
"$bin" --help > "$tmp/help.txt"
grep -q "^Trains an FX-imported torchvision classifier" "$tmp/help.txt" && grep -q "^  --steps  " "$tmp/help.txt" \
  || { cat "$tmp/help.txt"; exit 1; }

# Bad flags: exit status 2 and a message naming the flag, before any worker starts.
expect_usage_error() {
  local message=$1
  shift
  local status=0
  "$bin" "$@" 2> "$tmp/err.txt" || status=$?
  if [[ $status -ne 2 ]] || ! grep -qF -- "$message" "$tmp/err.txt"; then
    echo "FAIL: $* should exit 2 with '$message'; got status $status and:"
    cat "$tmp/err.txt"
    exit 1
  fi
}
expect_usage_error "--lr=nan: must be a finite number in [0, 10]" --lr=nan
expect_usage_error "--lr=-0.001: must be a finite number in [0, 10]" --lr=-1e-3
expect_usage_error "--lr=0: nothing would train" --lr=0
expect_usage_error "--weight_decay=inf: must be a finite number in [0, 10]" --weight_decay=inf
expect_usage_error "--noise=-0.1: must be a finite number in [0, 1]" --noise=-0.1
expect_usage_error "--steps=0: must be at least 1" --steps=0
expect_usage_error "--world_size=-2: must be at least 1" --world_size=-2
expect_usage_error "--train_images=-5: must be at least 1" --train_images=-5
expect_usage_error "--shard_groups: an empty prefix" --shard_groups=layer1,,layer2
expect_usage_error "--lr_schedule: unknown learning-rate schedule 'step' (constant or cosine)" --lr_schedule=step
expect_usage_error "--warmup_steps=10: must be fewer than --steps=10" --steps=10 --warmup_steps=10
expect_usage_error "--min_lr=0.01: must be a finite number in [0, 0.001]" --min_lr=0.01
# A missing export names the path (exit 1, from the worker).
if "$bin" --world_size=1 --joint="$tmp/none.fx.json" --out_dir="$tmp/bad" 2> "$tmp/err.txt"; then
  echo "FAIL: a missing --joint should fail"
  exit 1
fi
grep -qF -- "--joint=$tmp/none.fx.json" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }

# The short run.
# Two warm-up steps: step 0 runs at half the learning rate, so the PyTorch check below also
# proves that the rate Magi records is the rate it applies (step 1's loss depends on it).
"$bin" --world_size=2 --steps=80 --warmup_steps=2 --test_images=500 --eval_every=40 --log_every=20 \
  --out_dir="$tmp/run" --summary_json="$tmp/summary_copy.json" --dump_dir="$tmp/dump" 2> "$tmp/log.txt" \
  || { cat "$tmp/log.txt"; exit 1; }
cat "$tmp/log.txt"
for f in run/summary.json run/final_weights.json run/final_weights.bin summary_copy.json \
         dump/batches.json dump/losses.json dump/test.json; do
  [[ -s "$tmp/$f" ]] || { echo "FAIL: missing $tmp/$f"; exit 1; }
done
grep -q "^step 20/80 | epoch 0.26 | loss [0-9.]* | lr [0-9.e+-]* | [0-9.]* images/s | ETA " "$tmp/log.txt" \
  || { echo "FAIL: no progress line for step 20"; exit 1; }
grep -q "^step 40/80 .* | test accuracy [0-9.]*%$" "$tmp/log.txt" || { echo "FAIL: no --eval_every line"; exit 1; }
"$python" - "$tmp/run/summary.json" "$tmp/summary_copy.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s == json.load(open(sys.argv[2])), "--summary_json differs from summary.json"
assert s["world_size"] == 2 and s["steps"] == 80 and s["batch_per_rank"] == 32, s
assert len(s["losses"]) == 80 and s["final_loss"] == s["losses"][-1], s
assert s["lr_schedule"] == "cosine" and s["lr"] == 1e-3 and s["warmup_steps"] == 2 and s["min_lr"] == 0, s
assert s["shard_groups"] == ["layer1", "layer2", "layer3", "layer4", ""], s
assert [step for step, _ in s["test_accuracy_during_training"]] == [40], s
# docs/examples.md gives what this run measured; 0.3 is three times chance.
assert s["test_accuracy"] >= 0.3, "test accuracy %.3f: not well above chance (0.1)" % s["test_accuracy"]
assert s["final_loss"] < s["initial_loss"] - 0.5, s
print("summary ok: loss %.3f -> %.3f, train accuracy %.3f, test accuracy %.3f" %
      (s["initial_loss"], s["final_loss"], s["train_accuracy"], s["test_accuracy"]))
PY
"$python" tools/train_vision_check.py --dump "$tmp/dump" --out_dir "$tmp/run" --steps 4

# --deterministic and --plan_hash reach the FX trainer: a deterministic run prints its plan
# hash; a second one pinned to that hash trains the same losses bitwise; a wrong hash is
# refused at compile time, naming both hashes.
"$bin" --world_size=2 --steps=2 --test_images=100 --deterministic --out_dir="$tmp/det1" 2> "$tmp/det1.txt" \
  || { cat "$tmp/det1.txt"; exit 1; }
hash=$(sed -n 's/^magi: plan hash \([0-9a-f]\{16\}\) (the same on all 2 ranks)$/\1/p' "$tmp/det1.txt")
[[ -n "$hash" ]] || { echo "FAIL: no plan hash line"; cat "$tmp/det1.txt"; exit 1; }
"$bin" --world_size=2 --steps=2 --test_images=100 --deterministic --plan_hash="$hash" --out_dir="$tmp/det2" \
  2> "$tmp/det2.txt" || { cat "$tmp/det2.txt"; exit 1; }
"$python" - "$tmp/det1/summary.json" "$tmp/det2/summary.json" "$hash" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["deterministic"] and a["plan_hash"] == sys.argv[3] == b["plan_hash"], (a["plan_hash"], b["plan_hash"])
assert a["losses"] == b["losses"], (a["losses"], b["losses"])
print("deterministic ok: plan", a["plan_hash"], "losses", a["losses"])
PY
if "$bin" --world_size=2 --steps=2 --test_images=100 --plan_hash=0123456789abcdef --out_dir="$tmp/wrong" \
  2> "$tmp/wrong.txt"; then
  echo "FAIL: a wrong --plan_hash should fail"; exit 1
fi
grep -q "not the expected 0123456789abcdef" "$tmp/wrong.txt" || { cat "$tmp/wrong.txt"; exit 1; }
