#!/usr/bin/env bash
# Installs tools/python_requirements.txt (PyPI, pinned by hash) for Debian's /usr/bin/python3,
# the interpreter with python3-torch that the FX exporter and its tests use. Idempotent: one
# import check when everything is there. Needs root (as the apt step of tools/bazel does);
# otherwise it prints the command to run and stops.
set -euo pipefail
readonly PY=/usr/bin/python3
readonly REQUIREMENTS="$(dirname "${BASH_SOURCE[0]}")/python_requirements.txt"
[[ -x "$PY" ]] || exit 0  # no Debian Python: the FX targets say what is missing
"$PY" -c 'import expecttest' 2>/dev/null && exit 0
command=("$PY" -m pip install --quiet --no-deps --require-hashes --break-system-packages --root-user-action=ignore -r "$REQUIREMENTS")
if [[ $(id -u) -ne 0 ]]; then
  echo "tools/python_deps.sh: missing Python packages for $PY; install them with: sudo ${command[*]}" >&2
  exit 1
fi
echo "tools/python_deps.sh: installing $REQUIREMENTS for $PY" >&2
"${command[@]}" >&2
