#!/usr/bin/env bash
# OpInfo conformance (tools/fx_opinfo.py): PyTorch's op_db samples exported with Debian's
# PyTorch 1.13, imported and run by fx_run, compared with PyTorch. Fails on any wrong result.
# As a test it runs the subset its BUILD rule passes; `tools/bazel run
# //magi/frontend/fx:fx_opinfo -- --noncontiguous` runs all of op_db (see docs/fx.md).
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/opinfo"
exec /usr/bin/python3 tools/fx_opinfo.py --fx_run magi/frontend/fx/fx_run --out "$out" "$@"
