# Session 18, call A: CPU offload's and the small step's predictions (graph + measured op table kept),
# then Inductor's settings again (session 10's command; its results.json was not kept then).
# Run on the GPU machine from the repository root, with tools/device_sysroot.sh run here first and
# .device carried; $OUT is the device tool's output folder.
set -uo pipefail
source .device/start.sh || exit 1
$BAZEL build $BAZEL_FLAGS --config=cuda --config=opt //examples:train 2>&1 | tail -n 2
unset CC CXX
R=$OUT/a; mkdir -p $R
T=bazel-bin/examples/train
for v in device offload; do
  extra=""; [[ $v == offload ]] && extra=--cpu_offload
  $T --model=small --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=20 --untimed_steps=5 \
     --lr=3e-4 --backend=nccl_stream $extra --out_dir=/tmp/o_$v --summary_json=$R/small_$v.json \
     --dump_graph=$R/small_$v.mir --calibration_out=$R/small_$v.calibration.csv > $R/small_$v.log 2>&1
  echo "small $v rc=$?"
done
tail -n 4 $R/small_*.log
timeout 420 python3 benchmarks/inductor_settings.py --train $T --out_dir /tmp/s --variant default= \
    --variant combo=combo_kernels=true --variant cdt=coordinate_descent_tuning=true \
    --variant aggr=aggressive_fusion=true --rounds 2 --steps 25 --warmup 5 > $R/inductor_settings.log 2>&1
echo "inductor_settings rc=$?"
cp /tmp/s/results.json /tmp/s/table.md $R/ 2>/dev/null
tail -n 12 $R/inductor_settings.log
cd $OUT && tar czf a.tar.gz a && rm -rf a
