#!/usr/bin/env bash
# The runner of every magi_py_test (magi/testing.bzl): `python_test.sh PYTHON SCRIPT ARGS...`
# runs a Python test file with that interpreter, its temporary files in the test's own folder.
set -euo pipefail
python=$1
script=$2
shift 2
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec "$python" "$script" "$@"
