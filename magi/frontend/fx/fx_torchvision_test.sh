#!/usr/bin/env bash
# torchvision models that write in place through views (issue 15): convnext_tiny (autograd's
# new_empty -> zero_ -> as_strided -> copy_ pattern in its joint graph) and swin_t (shifted-window
# attention masks built with fill_ on slices), 10 classes on two 64x64 images, forward and joint.
# By default their narrow twins (tools.fx_models:convnext_tiny_narrow, swin_t_narrow): the same
# architectures, stages, blocks, windows and graphs node for node at a sixth and a quarter of the
# width (0.8 M and 1.8 M parameters instead of 28 M); the full-size ones are the specs
# tv_convnext_tiny and tv_swin_t. Exported at test time, all in one process, by the PyTorch of
# the configured LibTorch into the test's temporary folder (kept out of Bazel's outputs and cache),
# then imported and run twice by fx_run, which must find every output bitwise equal to PyTorch's
# eager result (measured so on LibTorch 1.13, docs/fx.md).
#
#   fx_torchvision_test.sh --python=PYTHON [--tolerance=X] [SPEC...]
set -euo pipefail
python=/usr/bin/python3
tolerance=0
specs=()
for arg in "$@"; do
  case "$arg" in
    --python=*) python=${arg#--python=} ;;
    --tolerance=*) tolerance=${arg#--tolerance=} ;;
    *) specs+=("$arg") ;;
  esac
done
[[ ${#specs[@]} -gt 0 ]] || specs=(convnext_tiny_narrow swin_t_narrow)
if [[ -z "$python" || ! -x "$python" ]]; then
  echo "fx_torchvision_test.sh: no Python for the configured LibTorch ('$python'): see docs/torch2.md" >&2
  exit 1
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/torchvision"
mkdir -p "$work"
exports=()
for spec in "${specs[@]}"; do
  for mode in forward joint; do
    exports+=(--export "tools.fx_models:$spec" "$mode" "$work/$spec.$mode")
  done
done
start=$SECONDS
if ! "$python" tools/fx_export.py "${exports[@]}" 2>"$work/err" | sed 's/^/  /'; then
  echo "FAIL: export failed: $(tail -3 "$work/err")"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "  ($((2 * ${#specs[@]})) graphs exported in $((SECONDS - start)) s)"
passed=0
failed=0
for spec in "${specs[@]}"; do
  for mode in forward joint; do
    start=$SECONDS
    if magi/frontend/fx/fx_run --runs=2 --tolerance="$tolerance" "$work/$spec.$mode.fx.json"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
    echo "  ($spec $mode: import + 2 runs $((SECONDS - start)) s)"
    rm -f "$work/$spec.$mode.tensors"
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
