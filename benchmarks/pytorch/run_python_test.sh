#!/usr/bin/env bash
# Runs a Python unittest file under Debian's /usr/bin/python3, whose python3-torch (1.13) tools/bazel
# installs: `python3` on PATH may be another interpreter without torch. Usage: run_python_test.sh FILE.py
set -euo pipefail
exec /usr/bin/python3 "$1" -v
