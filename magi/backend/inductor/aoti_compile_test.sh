#!/usr/bin/env bash
# Runs aoti_compile_test.py (no PyTorch needed: a stand-in torch module) with Debian's Python.
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec /usr/bin/python3 magi/backend/inductor/aoti_compile_test.py
