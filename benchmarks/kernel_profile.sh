#!/usr/bin/env bash
# Where the device time of the 953M Llama step goes, kernel by kernel, per configuration:
# one step of examples:train recorded by Kineto (--kernel_trace) and summed by kernel family
# (tools/kernel_breakdown.py). Stream mode (no CUDA graph), so every kernel shows with its
# launch; the kernels are those of the CUDA-graph step. On the GPU machine, after a
# `--config=cuda --config=opt` build of //examples:train:
#
#   bash benchmarks/kernel_profile.sh OUT_DIR [CONFIG...]
#
# CONFIG is any of: nccl_stream (the ATen kernels), inductor (+ the inductor partitions),
# deterministic (nccl_stream in deterministic mode), nccl_stream_graph and inductor_graph
# (the first two as a CUDA graph replay), inductor_graph_split (inductor_graph with split fp32
# masters), inductor_graph_split_unaligned (the same without align-collectives); default the
# first three. Writes per config
# NAME.log, NAME.breakdown.md (the tables), NAME.breakdown.json and NAME.trace.json.gz.
# Reading the *_graph spans: under Kineto the device starts a replay of a graph whose memset
# nodes nccl_stream rewrote (graph_memset_kernels, the default) only when the host's
# cudaGraphLaunch returns, ~1.4 ms after the call for the 953M step, so the span (not the busy
# time or the kernel times) includes that wait, which untraced steps do not have
# (`tools/kernel_breakdown.py --edges` shows it).
set -euo pipefail
out=${1:?usage: kernel_profile.sh OUT_DIR [nccl_stream|inductor|deterministic ...]}
shift
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(nccl_stream inductor deterministic)
train=${TRAIN:-bazel-bin/examples/train}
mkdir -p "$out"
# Inductor and Triton compile with the image's own compiler, not the CC Bazel was given.
unset CC CXX
common=(--model=1b --dtype=bf16 --device=cuda --world_size=1 --checkpoint=false --steps=4 --untimed_steps=2
        --lr=3e-4 --device_profile=h200 --calibration=none)
for config in "${configs[@]}"; do
  case $config in
    nccl_stream) flags=(--backend=nccl_stream) ;;
    inductor) flags=(--backend=nccl_stream --partition_backends=inductor) ;;
    # The same steps replayed as one CUDA graph (steps 3-4: the traced step is a replay).
    nccl_stream_graph) flags=('--backend=nccl_stream{cuda_graph=true}') ;;
    inductor_graph) flags=('--backend=nccl_stream{cuda_graph=true}' --partition_backends=inductor) ;;
    # The same with split fp32 masters (no parameter casts; docs/fsdp.md).
    inductor_graph_split) flags=('--backend=nccl_stream{cuda_graph=true}' --partition_backends=inductor
                                 --split_master_weights) ;;
    # ... with the collectives left where capture put them (no align-collectives before
    # partitioning: docs/backends.md).
    inductor_graph_split_unaligned) flags=('--backend=nccl_stream{cuda_graph=true}' --partition_backends=inductor
                                           --split_master_weights --partition_align_collectives=false) ;;
    deterministic) flags=(--backend=nccl_stream --deterministic) ;;
    *) echo "kernel_profile.sh: unknown config '$config' (nccl_stream, inductor, deterministic, nccl_stream_graph," \
         "inductor_graph, inductor_graph_split, inductor_graph_split_unaligned)" >&2; exit 2 ;;
  esac
  echo "== $config: ${flags[*]}"
  if ! "$train" "${common[@]}" "${flags[@]}" --out_dir="$out/$config" --kernel_trace="$out/$config.trace.json" \
      >"$out/$config.log" 2>&1; then
    echo "kernel_profile.sh: $config failed:" >&2
    tail -20 "$out/$config.log" >&2
    continue
  fi
  python3 tools/kernel_breakdown.py "$out/$config.trace.json" --top 25 --json "$out/$config.breakdown.json" \
    | tee "$out/$config.breakdown.md"
  gzip -f "$out/$config.trace.json"
done
