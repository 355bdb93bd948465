#!/usr/bin/env bash
# Runs examples:train as a user would (2 local processes, a few steps) and checks what it
# promises: a falling loss, the summary JSON fields, the loss curve files, a committed
# checkpoint step with one file per rank, a clear error for a bad flag, bitwise resume,
# resume at other world sizes and inference. checkpoint_kill_test.sh kills runs while they save.
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/train"
# Calibration by default measures into this cache (not the user's ~/.cache/magi).
export MAGI_CACHE_DIR="$out/cache"
# --help prints what the program does and its own flags, and exits 0.
mkdir -p "$out"
examples/train --help > "$out/help.txt"
grep -q "^Trains the Llama-style model" "$out/help.txt" && grep -q "^  --steps  " "$out/help.txt" \
  && ! grep -q "absl" "$out/help.txt" || { cat "$out/help.txt"; exit 1; }
examples/train --steps=12 --world_size=2 --out_dir="$out" --summary_json="$out/summary_copy.json"
for f in loss.csv loss.svg summary.json summary_copy.json checkpoint/step-00000012/manifest.json \
         checkpoint/step-00000012/rank0.pt checkpoint/step-00000012/rank1.pt; do
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
# Each timed step (after --untimed_steps=1), whose mean is step_seconds.
times = s["timed_step_seconds"]
assert len(times) == s["timed_steps"] == 11 and all(t > 0 for t in times), s
assert abs(sum(times) / len(times) - s["step_seconds"]) < 1e-5, s
# On CPU no library holds device memory beside the plan (GPU: PyTorch's GEMM workspaces).
assert s["predicted_library_device_bytes"] == 0 and s["library_device_bytes"] == 0, s
print("summary ok:", s)
PY
[[ $(wc -l < "$out/loss.csv") -eq 13 ]] || { echo "loss.csv should have a header and 12 rows"; exit 1; }
grep -q "<path d=\"M" "$out/loss.svg"
if examples/train --model=huge --world_size=1 --out_dir="$out/bad" 2> "$out/err.txt"; then
  echo "a bad --model should fail"; exit 1
fi
grep -q "unknown --model=huge (tiny, small or 1b)" "$out/err.txt"
# Numeric flags are range-checked before any process starts; NaN and infinity never pass.
for bad in "--memory_budget_gb=nan:--memory_budget_gb=nan: expected a non-negative, finite number" \
           "--budget_gb=-1:--budget_gb=-1: expected a non-negative, finite number" \
           "--clip_grad_norm=inf:--clip_grad_norm=inf: expected a non-negative, finite number" \
           "--lr=0:--lr=0: expected a positive, finite number" \
           "--lr=-nan:--lr=nan: expected a positive, finite number" \
           "--memory_budget_gb=1e300:--memory_budget_gb=1e+300: more bytes than an int64 holds" \
           "--grad_accum=0:--grad_accum=0: must be >= 1" \
           "--communicator=mpi:--communicator=mpi: unknown communicator 'mpi'; registered: "; do
  flag=${bad%%:*}
  if examples/train "$flag" --world_size=1 --out_dir="$out/bad" 2> "$out/err.txt"; then
    echo "$flag should fail"; exit 1
  fi
  grep -qF -- "${bad#*:}" "$out/err.txt" || { echo "$flag: unexpected error:"; cat "$out/err.txt"; exit 1; }
done
# Communicators are chosen by name (the default is the device's: gloo on the CPU); naming it
# gives the same losses as the default.
examples/train --communicator=gloo --steps=2 --world_size=2 --checkpoint=false --out_dir="$out/gloo"
examples/train --steps=2 --world_size=2 --checkpoint=false --out_dir="$out/default_communicator"
python3 - "$out/gloo/summary.json" "$out/default_communicator/summary.json" <<'PY'
import json, sys
named, default = (json.load(open(path))["losses"] for path in sys.argv[1:])
assert named == default, (named, default)
PY
# A run resumed from its checkpoint continues bitwise: 3 + 3 steps == 6 steps.
examples/train --steps=6 --world_size=2 --out_dir="$out/straight"
examples/train --steps=3 --world_size=2 --out_dir="$out/resumed"
cp -r "$out/resumed" "$out/on1"
cp -r "$out/resumed" "$out/on4"
cp -r "$out/resumed" "$out/on3"
examples/train --steps=6 --world_size=2 --out_dir="$out/resumed" --resume
for f in rank0.pt rank1.pt manifest.json; do
  cmp "$out/straight/checkpoint/step-00000006/$f" "$out/resumed/checkpoint/step-00000006/$f"
done
[[ "$(tail -n 1 "$out/straight/loss.csv")" == "$(tail -n 1 "$out/resumed/loss.csv")" ]] \
  || { echo "last losses differ: $(tail -n 1 "$out/straight/loss.csv") vs $(tail -n 1 "$out/resumed/loss.csv")"; exit 1; }
# Another world size resumes the same run (issue 16): the step-3 checkpoint of 2 ranks,
# resharded for 1 and for 4 ranks, with the same global batch (16 sequences), gives the
# losses of the uninterrupted run within fp32 rounding (the gradient sums run in another order).
examples/train --steps=6 --world_size=1 --batch_size=16 --out_dir="$out/on1" --resume 2> "$out/on1.txt" \
  || { cat "$out/on1.txt"; exit 1; }
grep -q "resumed from $out/on1/checkpoint/step-00000003 at step 3" "$out/on1.txt" || { cat "$out/on1.txt"; exit 1; }
grep -q "resumed a checkpoint written by 2 ranks with 16 samples per step on 1 rank x 16 = 16 samples per step: the same global batch" \
  "$out/on1.txt" || { cat "$out/on1.txt"; exit 1; }
examples/train --steps=6 --world_size=4 --batch_size=4 --out_dir="$out/on4" --resume
python3 - "$out/straight/summary.json" "$out/on1/summary.json" "$out/on4/summary.json" <<'PY'
import json, sys
straight = json.load(open(sys.argv[1]))["losses"][3:]
for path in sys.argv[2:]:
    s = json.load(open(path))
    assert len(s["losses"]) == 3, s
    for a, b in zip(s["losses"], straight):
        assert abs(a - b) <= 1e-5 * abs(b), (path, s["losses"], straight)
    print("resharded resume ok:", s["world_size"], "ranks", s["losses"], "vs", straight)
PY
# Resuming on 3 ranks of 8 changes the global batch from 16 to 24: said in one line and
# recorded in the summary (token_batches_test checks which samples each step then reads).
examples/train --steps=5 --world_size=3 --out_dir="$out/on3" --resume 2> "$out/on3.txt" || { cat "$out/on3.txt"; exit 1; }
grep -q "resumed a checkpoint written by 2 ranks with 16 samples per step on 3 ranks x 8 = 24 samples per step: the global batch \
changes from 16 to 24; steps 4-5 read samples 0-23 of each step's draw" "$out/on3.txt" || { cat "$out/on3.txt"; exit 1; }
python3 - "$out/on3/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
got = {k: s[k] for k in ("global_batch", "resumed_from_step", "resumed_world_size", "resumed_global_batch")}
assert got == {"global_batch": 24, "resumed_from_step": 3, "resumed_world_size": 2, "resumed_global_batch": 16}, got
assert len(s["losses"]) == 2, s["losses"]
PY
# Another model or another run configuration is refused, naming what differs.
if examples/train --steps=7 --world_size=2 --model=small --out_dir="$out/resumed" --resume 2> "$out/err2.txt"; then
  echo "resuming with another model should fail"; exit 1
fi
grep -q "was written by the run configuration 'model=tiny dtype=f32 seq_len=64 seed=0 data=text'; this run is 'model=small" "$out/err2.txt"
if examples/train --steps=7 --world_size=2 --seed=3 --out_dir="$out/resumed" --resume 2> "$out/err2.txt"; then
  echo "resuming with another seed should fail"; exit 1
fi
grep -q "this run is 'model=tiny dtype=f32 seq_len=64 seed=3 data=text'" "$out/err2.txt"

# The inference example continues a prompt with the trained shards (full-graph inference
# path), on 2 ranks and, resharded, on 1: the same text.
examples/generate --world_size=2 --checkpoint_dir="$out/straight/checkpoint" --length=40 --prompt="Sonnet" > "$out/gen.txt"
[[ $(wc -c < "$out/gen.txt") -ge 46 ]] || { echo "generated too little: $(cat "$out/gen.txt")"; exit 1; }
head -c 6 "$out/gen.txt" | grep -q "^Sonnet"
examples/generate --world_size=1 --checkpoint_dir="$out/straight/checkpoint" --length=40 --prompt="Sonnet" > "$out/gen1.txt"
cmp "$out/gen.txt" "$out/gen1.txt"
if examples/generate --world_size=1 --checkpoint_dir="$out/nothing" --length=5 2> "$out/err3.txt"; then
  echo "generating without a checkpoint should fail"; exit 1
fi
grep -q "no committed checkpoint under $out/nothing" "$out/err3.txt"
# Without a checkpoint the output folder (nested, new) is still made and written.
examples/train --steps=2 --world_size=1 --checkpoint=false --out_dir="$out/new/nested" > /dev/null
[[ -s "$out/new/nested/summary.json" && ! -e "$out/new/nested/checkpoint" ]]
# FSDP2's reshard_after_forward=K (issue 16): 4 ranks resharding to 2 after forward
# train as eager does; K that is 1, the shard group or no divisor of it is refused.
examples/train --steps=3 --world_size=4 --batch_size=2 --reshard_after_forward=2 --check_eager --checkpoint=false \
  --out_dir="$out/k2" 2> "$out/k2.txt" || { cat "$out/k2.txt"; exit 1; }
python3 - "$out/k2.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
worst = float(re.search(r"largest relative loss difference to eager: (\S+)", text).group(1))
assert worst <= 1e-5, text
print("reshard_after_forward=2 on 4 ranks: within", worst, "of eager")
PY
for k in 1 3 4 banana; do
  if examples/train --steps=1 --world_size=4 --reshard_after_forward=$k --checkpoint=false --out_dir="$out/k$k" \
      2> "$out/k_err.txt"; then
    echo "--reshard_after_forward=$k should fail"; exit 1
  fi
  if [[ $k == banana ]]; then
    grep -q "reshard_after_forward is true, false or a number of ranks, not 'banana'" "$out/k_err.txt" \
      || { cat "$out/k_err.txt"; exit 1; }
  else
    grep -q "reshard_after_forward=$k: .* $k must divide the 4 ranks of mesh axis 'dp' and be neither 1 nor 4" \
      "$out/k_err.txt" || { cat "$out/k_err.txt"; exit 1; }
  fi
done
# CPU offload (FSDP2's CPUOffloadPolicy): on this CPU-only machine the offloaded step (its
# copies, AdamW on host tensors) gives the same losses as the plain one, to the last digit.
examples/train --steps=4 --world_size=2 --cpu_offload --checkpoint=false --out_dir="$out/offload"
examples/train --steps=4 --world_size=2 --checkpoint=false --out_dir="$out/no_offload"
python3 - "$out/offload/summary.json" "$out/no_offload/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:])
assert a == b, (a, b)
print("cpu offload: the same losses", a)
PY
# Calibration by default: the first run measures the step's kernels and writes the
# device's cache; a second run reuses it and measures nothing; a corrupt cache is
# measured again with a warning; --calibration=none measures nothing.
cal="$out/calibration"
MAGI_CACHE_DIR="$cal" examples/train --steps=2 --world_size=2 --checkpoint=false --out_dir="$out/cal1" 2> "$out/cal1.txt" \
  || { cat "$out/cal1.txt"; exit 1; }
cache=$(ls "$cal"/calibration/cpu-*.csv)
grep -q "magi: calibration (cpu .*): [0-9]* kernels, 0 cached in $cache, [1-9][0-9]* measured" "$out/cal1.txt" \
  || { cat "$out/cal1.txt"; exit 1; }
head -2 "$cache" | grep -q "^# device: cpu .*, libtorch "
MAGI_CACHE_DIR="$cal" examples/train --steps=2 --world_size=2 --checkpoint=false --out_dir="$out/cal2" 2> "$out/cal2.txt" \
  || { cat "$out/cal2.txt"; exit 1; }
grep -q "kernels, [1-9][0-9]* cached in $cache, 0 measured" "$out/cal2.txt" || { cat "$out/cal2.txt"; exit 1; }
! grep -q "magi: calibrating" "$out/cal2.txt"
python3 - "$out/cal1/summary.json" "$out/cal2/summary.json" <<'PY'
import json, sys
first, second = (json.load(open(p)) for p in sys.argv[1:])
assert first["calibrated_kernels_measured"] > 0 and first["calibrated_kernels_cached"] == 0, first
assert second["calibrated_kernels_measured"] == 0, second
assert second["calibrated_kernels_cached"] == first["calibrated_kernels_measured"], (first, second)
assert second["predicted_step_seconds"] == first["predicted_step_seconds"], (first, second)
assert first["predicted_peak_memory_bytes"] == first["peak_memory_bytes"], first
print("calibration cache ok:", first["calibrated_kernels_measured"], "kernels measured, then reused")
PY
echo "garbage" >> "$cache"
MAGI_CACHE_DIR="$cal" examples/train --steps=1 --world_size=2 --checkpoint=false --out_dir="$out/cal3" 2> "$out/cal3.txt" \
  || { cat "$out/cal3.txt"; exit 1; }
grep -q "warning: calibration cache $cache:.*expected 'mean_seconds,count,key' or 'mean_seconds,count,working_bytes=N,key', got 'garbage'; the cached times are ignored, measured again and the file replaced" "$out/cal3.txt" \
  || { cat "$out/cal3.txt"; exit 1; }
! grep -q garbage "$cache"
# Calibration from the steps: a run of 12 steps records steps 3-12 (written after 8, and
# the last 2 at the end) into the cache's .steps.csv; the next compile takes every
# kernel's time from there.
fb="$out/feedback"
MAGI_CACHE_DIR="$fb" examples/train --steps=12 --world_size=2 --checkpoint=false --out_dir="$out/fb1" 2> "$out/fb1.txt" \
  || { cat "$out/fb1.txt"; exit 1; }
steps_file=$(ls "$fb"/calibration/cpu-*.steps.csv)
grep -q "magi: calibration: [1-9][0-9]* kernel times of steps 3-12 folded into $steps_file" "$out/fb1.txt" \
  || { cat "$out/fb1.txt"; exit 1; }
sed -n 3p "$steps_file" | grep -q "kernel times of real steps"
MAGI_CACHE_DIR="$fb" examples/train --steps=2 --world_size=2 --checkpoint=false --out_dir="$out/fb2" 2> "$out/fb2.txt" \
  || { cat "$out/fb2.txt"; exit 1; }
grep -q "kernels, [1-9][0-9]* from earlier steps in $steps_file, 0 cached in .*, 0 measured" "$out/fb2.txt" \
  || { cat "$out/fb2.txt"; exit 1; }
python3 - "$out/fb1/summary.json" "$out/fb2/summary.json" "$steps_file" <<'PY'
import json, sys
first, second = (json.load(open(p)) for p in sys.argv[1:3])
assert first["calibrated_kernels_from_steps"] == 0 and first["calibrated_kernels_measured"] > 0, first
assert second["calibrated_kernels_from_steps"] == first["calibrated_kernels_measured"], (first, second)
assert second["calibrated_kernels_measured"] == 0 and second["calibrated_kernels_cached"] == 0, second
# A collective's entry is its duration in the steps (10 steps x its occurrences samples).
rows = [line.split(",", 2) for line in open(sys.argv[3]) if not line.startswith("#")]
gathers = [(float(t), int(n)) for t, n, key in rows if key.startswith("magi::all_gather_start")]
assert gathers and all(t > 0 and n % 10 == 0 for t, n in gathers), gathers
print("calibration from the steps ok:", len(rows), "kernel times; the next compile measured nothing")
PY
MAGI_CACHE_DIR="$out/never" examples/train --steps=1 --world_size=2 --checkpoint=false --calibration=none \
  --out_dir="$out/cal4" 2> "$out/cal4.txt" || { cat "$out/cal4.txt"; exit 1; }
[[ ! -e "$out/never" ]] && ! grep -q "magi: calibrat" "$out/cal4.txt"
echo "train example ok"
