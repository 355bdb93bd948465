#!/usr/bin/env bash
# Exports models with tools/fx_export.py (forward and joint), imports and runs each with fx_run,
# and prints one markdown row per graph: the table "every model tried" of docs/fx.md.
#
#   tools/fx_try_models.sh tv_squeezenet1_0 tv_swin_t view_write ...   (specs of tools/fx_models.py)
#
# Builds //magi/frontend/fx:fx_run first; writes into a temporary folder it removes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bazel build //magi/frontend/fx:fx_run >/dev/null 2>&1 || { echo "fx_try_models: cannot build fx_run" >&2; exit 1; }
fx_run=$(pwd)/bazel-bin/magi/frontend/fx/fx_run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| model | mode | ATen ops (FX) | result |"
echo "| --- | --- | --- | --- |"
for spec in "$@"; do
  for mode in forward joint; do
    if ! line=$(/usr/bin/python3 tools/fx_export.py --spec "tools.fx_models:$spec" --mode "$mode" \
                 --out "$work/$spec.$mode" 2>"$work/err"); then
      echo "| $spec | $mode | | export refused: $(grep -v Warning "$work/err" | tail -1 | cut -c1-160) |"
      continue
    fi
    ops=$(sed -n 's/.*: \([0-9]*\) ops ->.*/\1/p' <<<"$line")
    result=$("$fx_run" --runs=2 "$work/$spec.$mode.fx.json" | sed "s#$work/##")
    echo "| $spec | $mode | $ops | ${result:0:200} |"
    rm -f "$work/$spec.$mode.tensors"
  done
done
