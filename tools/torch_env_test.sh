#!/usr/bin/env bash
# Runs tools/torch_env_test.py (no network, no PyTorch) with the Python tools/bazel runs torch_env.py with.
set -euo pipefail
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec /usr/bin/python3 tools/torch_env_test.py
