#!/usr/bin/env bash
# Runs tools/compare_step_tables_test.py (standard library only).
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec /usr/bin/python3 tools/compare_step_tables_test.py
