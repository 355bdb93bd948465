#!/usr/bin/env bash
# Runs tools/kernel_breakdown_test.py (no PyTorch needed).
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec /usr/bin/python3 tools/kernel_breakdown_test.py
