#!/usr/bin/env bash
# Runs tools/fx_export_test.py with the Python of the configured LibTorch (--python=...).
set -euo pipefail
python=/usr/bin/python3
if [[ "${1:-}" == --python=* ]]; then
  python=${1#--python=}
fi
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec "$python" tools/fx_export_test.py
