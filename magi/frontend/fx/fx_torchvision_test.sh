#!/usr/bin/env bash
# Full-size torchvision models that write in place through views (issue 15): convnext_tiny
# (autograd's new_empty -> zero_ -> as_strided -> copy_ pattern in its joint graph) and swin_t
# (shifted-window attention masks built with fill_ on slices), 10 classes on two 64x64 images
# (tools.fx_models:tv_<name>), forward and joint. Exported at test time by the PyTorch of the
# configured LibTorch into the test's temporary folder (the joint files are 220 MB each: kept out
# of Bazel's outputs and cache), then imported and run twice by fx_run, which must find every
# output bitwise equal to PyTorch's eager result (measured so on LibTorch 1.13, docs/fx.md).
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
[[ ${#specs[@]} -gt 0 ]] || specs=(tv_convnext_tiny tv_swin_t)
if [[ -z "$python" || ! -x "$python" ]]; then
  echo "fx_torchvision_test.sh: no Python for the configured LibTorch ('$python'): see docs/torch2.md" >&2
  exit 1
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/torchvision"
mkdir -p "$work"
passed=0
failed=0
for spec in "${specs[@]}"; do
  for mode in forward joint; do
    start=$SECONDS
    if ! "$python" tools/fx_export.py --spec "tools.fx_models:$spec" --mode "$mode" --out "$work/$spec.$mode" \
         2>"$work/err" | sed 's/^/  /'; then
      echo "FAIL $spec $mode: export failed: $(tail -3 "$work/err")"
      failed=$((failed + 1))
      continue
    fi
    exported=$((SECONDS - start))
    if magi/frontend/fx/fx_run --runs=2 --tolerance="$tolerance" "$work/$spec.$mode.fx.json"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
    echo "  ($spec $mode: export ${exported} s, import + 2 runs $((SECONDS - start - exported)) s)"
    rm -f "$work/$spec.$mode.tensors"
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
