# Session 21, call B: the strategy search's plans for the 953M step on one H200 at a range of
# memory budgets (fractions of the plain step's measured peak in call A, 26.07 GB), each run
# and measured: predicted against measured step time and peak along the frontier. Uses call A's
# calibration table (docs/benchmarks/calibration_h200_session21/a/cache) so that no run micro-runs
# the kernels again and every run plans from the same times. Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
# The calibrator's CUDA tests (a one-rank collective left to the formula unannounced; a partition's peak).
$BAZEL test $BAZEL_FLAGS --config=cuda --config=opt //magi/backend/interpreter:kernel_calibrator_test \
  --test_output=errors 2>&1 | tail -n 3
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/b; mkdir -p $R
T=bazel-bin/examples/train
export MAGI_CACHE_DIR=/tmp/magi_cache_s21b; rm -rf $MAGI_CACHE_DIR
cp -r docs/benchmarks/calibration_h200_session21/a/cache $MAGI_CACHE_DIR
for f in 0.9 0.7 0.6 0.5 0.4 0.3; do
  budget=$(python3 -c "print(round($f * 26.069757, 2))")
  t0=$SECONDS
  timeout 150 $T --model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=15 --untimed_steps=5 \
     --lr=3e-4 --device_profile=h200 --backend='nccl_stream{cuda_graph=true}' --budget_gb=$budget \
     --out_dir=/tmp/o_$f --summary_json=$R/1b_budget$f.json > $R/1b_budget$f.log 2>&1
  echo "budget $f ($budget GB) rc=$? $((SECONDS - t0)) s: $(grep -E '^step graph|nothing fits|error' $R/1b_budget$f.log | head -2)"
done
cp bazel-testlogs/magi/backend/interpreter/kernel_calibrator_test/test.log $R/kernel_calibrator_test.log 2>/dev/null
cd $OUT && tar czf b.tar.gz b && rm -rf b
