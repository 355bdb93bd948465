#!/usr/bin/env bash
# examples:generate's rates on this machine: the table "Tokens/s on this machine" of docs/examples.md.
#
#   examples/generate_rates.sh OUT_DIR
#
# Trains the tiny model's checkpoint (examples:train --steps=200, once: OUT_DIR/train), then runs
# each row's generation with the KV cache and with full recompute (--kv_cache=false), and writes
# every run's stderr, under a line `== ROW cache|recompute`, to OUT_DIR/generate.log; the docs
# render the table from that log (tools/doc_tables.py render log-rows). Time it on an idle
# machine: the rates are host-bound.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)  # before the cd below: OUT_DIR is the caller's
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! build=$(tools/bazel build //examples:train //examples:generate 2>&1); then
  echo "generate_rates: cannot build examples:train and :generate:" >&2
  tail -n 20 <<<"$build" >&2
  exit 1
fi
G=bazel-bin/examples/generate
C=$out/train/checkpoint
if [[ ! -d $C ]]; then
  echo "generate_rates: training the checkpoint (examples:train --steps=200)" >&2
  bazel-bin/examples/train --steps=200 --out_dir="$out/train" >"$out/train.log" 2>&1
  tail -n 2 "$out/train.log" >&2
fi
log=$out/generate.log
: >"$log"
run() {  # ROW FLAGS...
  local row=$1
  shift
  for mode in cache recompute; do
    local extra=()
    [[ $mode == recompute ]] && extra=(--kv_cache=false)
    echo "== $row $mode" >>"$log"
    echo "generate_rates: $row ($mode)" >&2
    "$G" "$@" "${extra[@]}" 2>>"$log" >/dev/null
  done
}
run tiny1 --checkpoint_dir="$C" --world_size=1 --prompt="Sonnet 7" --length=300 --progress_s=0
run tiny2 --checkpoint_dir="$C" --prompt="Sonnet 7" --length=300 --progress_s=0
run small1 --checkpoint_dir= --world_size=1 --model=small --seq_len=128 --length=200 --progress_s=0
grep -E '^magi: (decode|full recompute|prefill):|^== ' "$log" >&2
