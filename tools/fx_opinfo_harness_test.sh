#!/usr/bin/env bash
# Runs tools/fx_opinfo_harness_test.py with Debian's Python (it imports torch through fx_opinfo.py).
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec /usr/bin/python3 tools/fx_opinfo_harness_test.py
