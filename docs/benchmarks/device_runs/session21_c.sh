# Session 21, call C: after the review fix 2354aba (one-rank CUDA collectives stay asked for,
# with no time, so AgreeOnTimes no longer reads an empty cached time): the calibrator's CUDA
# tests, then the 953M CUDA-graph step from call A's cached table, whose summary must count the
# one-rank collectives as not measurable. Run as session18_a.sh says.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL test $BAZEL_FLAGS --config=cuda --config=opt //magi/backend/interpreter:kernel_calibrator_test \
  --test_output=errors 2>&1 | tail -n 3
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 1
unset CC CXX
R=$OUT/c; mkdir -p $R
cp bazel-testlogs/magi/backend/interpreter/kernel_calibrator_test/test.log $R/kernel_calibrator_test.log 2>/dev/null
grep -E "^\[ *(OK|FAILED|SKIPPED) " $R/kernel_calibrator_test.log | grep -i "cuda"
export MAGI_CACHE_DIR=/tmp/magi_cache_s21c; rm -rf $MAGI_CACHE_DIR
cp -r docs/benchmarks/calibration_h200_session21/a/cache $MAGI_CACHE_DIR
timeout 150 bazel-bin/examples/train --model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false \
  --steps=15 --untimed_steps=5 --lr=3e-4 --device_profile=h200 --backend='nccl_stream{cuda_graph=true}' \
  --out_dir=/tmp/o_c --summary_json=$R/1b_graph_cached.json > $R/1b_graph_cached.log 2>&1
echo "1b graph_cached rc=$? $(grep '^step graph' $R/1b_graph_cached.log)"
grep "^magi: calibrat" $R/1b_graph_cached.log
cd $OUT && tar czf c.tar.gz c && rm -rf c
