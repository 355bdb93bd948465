#!/usr/bin/env bash
# The runner of every magi_py_test (magi/testing.bzl): `python_test.sh [--env=NAME=VALUE]... PYTHON
# SCRIPT ARGS...` runs a Python test file with that interpreter, with those variables set, its
# temporary files in the test's own folder.
set -euo pipefail
while [[ $# -gt 0 && $1 == --env=* ]]; do
  export "${1#--env=}"
  shift
done
python=$1
script=$2
shift 2
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec "$python" "$script" "$@"
