#!/usr/bin/env bash
# OpInfo conformance (tools/fx_opinfo.py): PyTorch's op_db samples exported by the PyTorch of the
# configured LibTorch (--python=..., @libtorch's LIBTORCH_PYTHON: Debian's 1.13 or MAGI_TORCH's
# 2.x), imported and run by fx_run, compared with that PyTorch. Fails on any wrong result.
# As a test it runs the subset its BUILD rule passes; `tools/bazel run
# //magi/frontend/fx:fx_opinfo -- --noncontiguous` runs all of op_db (see docs/fx.md).
set -euo pipefail
python=/usr/bin/python3
if [[ "${1:-}" == --python=* ]]; then
  python=${1#--python=}
  shift
fi
if [[ -z "$python" || ! -x "$python" ]]; then
  echo "fx_opinfo_test.sh: no Python for the configured LibTorch ('$python'): see docs/torch2.md" >&2
  exit 1
fi
out="${TEST_TMPDIR:-$(mktemp -d)}/opinfo"
exec "$python" tools/fx_opinfo.py --fx_run magi/frontend/fx/fx_run --out "$out" "$@"
