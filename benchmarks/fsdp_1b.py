#!/usr/bin/env python3
"""The 953M Llama training step on one GPU: Magi's backends against PyTorch FSDP2, in ONE run.

Runs, one after another on the same GPU, with the same initial weights and batches (Magi
writes them once with --dump_dir; PyTorch reads them):
  Magi examples:train --model=1b --dtype=bf16 with the interpreter, nccl_stream (collectives
  kept and skipped), nccl_stream + CUDA graph; PyTorch FSDP2 eager and FSDP2 + per-block
  torch.compile (benchmarks/pytorch/fsdp2_llama.py).
Prints a Markdown table (ms/step, tokens/s, MFU, peak memory, host time, predicted time) and
the loss agreement, and writes everything under --out_dir (results.json, table.md, logs).

  python3 benchmarks/fsdp_1b.py --train bazel-bin/examples/train --out_dir $OUT
Options pick the columns (--only=magi,fsdp2), steps and warm-up. Needs the GPU machine's
python3 (PyTorch 2.x) for the FSDP2 columns.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from result_tables import fsdp2_result, fsdp_1b_table, gpu_energy_of

MAGI_RUNS = [
    # (label, backend spec, pass pipeline[, partition backends[, more examples:train flags]])
    ("Magi interpreter", "interpreter", ""),
    ("Magi interpreter + bucket/prefetch", "interpreter",
     "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}"),
    ("Magi nccl_stream, collectives kept", "nccl_stream{skip_single_rank=false}", ""),
    ("Magi nccl_stream", "nccl_stream", ""),
    ("Magi nccl_stream + CUDA graph", "nccl_stream{cuda_graph=true}", ""),
    # The compute between collectives compiled by AOTInductor (issue #13); --magi_runs=5.
    ("Magi nccl_stream + CUDA graph + inductor", "nccl_stream{cuda_graph=true}", "", "inductor"),
    # The CUDA-graph step without the deferred gradient casts (the bf16 -> fp32 casts run as
    # kernels; stream_plan.h): what folding them into the multi-tensor AdamW saves.
    ("Magi nccl_stream + CUDA graph, gradient casts not fused", "nccl_stream{cuda_graph=true,fuse_grad_cast=false}",
     ""),
    # The AdamW batches on their own stream during the backward (stream_plan.h, "Optimizer
    # overlap"), without and with the inductor partitions.
    ("Magi nccl_stream + CUDA graph + optimizer overlap", "nccl_stream{cuda_graph=true,overlap_optimizer=true}", ""),
    ("Magi nccl_stream + CUDA graph + inductor + optimizer overlap",
     "nccl_stream{cuda_graph=true,overlap_optimizer=true}", "", "inductor"),
    # The inductor step without the CUDA graph (every kernel launched from the host).
    ("Magi nccl_stream + inductor, stream mode", "nccl_stream", "", "inductor"),
    # Split fp32 masters (bf16 high half + low bits: the parameter casts go; docs/fsdp.md).
    ("Magi nccl_stream + CUDA graph + inductor + split masters", "nccl_stream{cuda_graph=true}", "", "inductor",
     ["--split_master_weights"]),
    # The same with the captured graph's memset nodes left as they are (nccl_stream.h,
    # graph_memset_kernels; docs/backends.md).
    ("Magi nccl_stream + CUDA graph + inductor + split masters, memset nodes kept",
     "nccl_stream{cuda_graph=true,graph_memset_kernels=false}", "", "inductor", ["--split_master_weights"]),
]


def run(cmd, log_path, env=None, timeout=900):
    print("+", " ".join(cmd), flush=True)
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    seconds = time.time() - start
    if proc.returncode != 0:
        with open(log_path) as log:
            tail = log.read()[-3000:]
        print(f"FAILED ({proc.returncode}) after {seconds:.0f} s:\n{tail}", flush=True)
        return False
    print(f"  done in {seconds:.0f} s", flush=True)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default="bazel-bin/examples/train")
    parser.add_argument("--fsdp2", default=os.path.join(os.path.dirname(__file__), "pytorch", "fsdp2_llama.py"))
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--only", default="magi,fsdp2")
    parser.add_argument("--magi_runs", default="", help="comma-separated labels' indices to run (default all)")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    data_dir = os.path.join(args.out_dir, "data")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    results = []
    common = ["--model=1b", "--dtype=bf16", "--device=cuda", "--world_size=1", "--checkpoint=false",
              f"--steps={args.steps}", f"--untimed_steps={args.warmup}", f"--lr={args.lr}", "--device_profile=h200"]
    dumped = False
    wanted = set(args.only.split(","))
    picked = [int(i) for i in args.magi_runs.split(",") if i] or list(range(len(MAGI_RUNS)))
    if "magi" in wanted:
        for index in picked:
            label, backend, passes = MAGI_RUNS[index][:3]
            partition_backends = MAGI_RUNS[index][3] if len(MAGI_RUNS[index]) > 3 else ""
            tag = f"magi{index}"
            summary = os.path.join(args.out_dir, f"{tag}.json")
            cmd = [args.train] + common + [f"--backend={backend}", f"--out_dir={os.path.join(args.out_dir, tag)}",
                                           f"--summary_json={summary}"]
            if passes:
                cmd.append(f"--passes={passes}")
            if len(MAGI_RUNS[index]) > 4:
                cmd += MAGI_RUNS[index][4]
            run_env = env
            if partition_backends:
                cmd += [f"--partition_backends={partition_backends}",
                        f"--dump_graph={os.path.join(args.out_dir, tag + '.mir')}"]
                # The inductor backend compiles with python3 and Triton, which must not get the
                # Bazel-only CC/CXX of on-device.sh (see the FSDP2 runs below).
                run_env = {k: v for k, v in env.items() if k not in ("CC", "CXX")}
            if not dumped:
                cmd.append(f"--dump_dir={data_dir}")
            if run(cmd, os.path.join(args.out_dir, f"{tag}.log"), run_env, timeout=1800 if partition_backends else 900):
                dumped = True
                with open(summary) as f:
                    s = json.load(f)
                each = [1e3 * t for t in s.get("timed_step_seconds", [])]
                results.append({"label": label, "ms": statistics.median(each) if each else s["step_seconds"] * 1e3,
                                "mean_ms": s["step_seconds"] * 1e3, "tokens": s["tokens_per_step"],
                                "peak_gib": s["allocator_peak_bytes"] / 2**30 if s["allocator_peak_bytes"] > 0 else None,
                                "host_ms": s["host_seconds_per_step"] * 1e3,
                                "predicted_ms": s["predicted_step_seconds"] * 1e3, "losses": s["losses"],
                                "compile_s": s.get("compile_seconds"), "partitions": s.get("partitions"),
                                "step_ms_each": each, **gpu_energy_of(s)})
                print(f"  compiled in {s.get('compile_seconds', float('nan')):.1f} s, "
                      f"{s.get('partitions', 0)} partitions", flush=True)
    if "fsdp2" in wanted:
        if not dumped and not os.path.exists(os.path.join(data_dir, "weights.json")):
            run([args.train] + common + ["--steps=" + str(args.steps), "--backend=interpreter",
                                         f"--dump_dir={data_dir}", "--untimed_steps=0",
                                         f"--out_dir={os.path.join(args.out_dir, 'dump')}"],
                os.path.join(args.out_dir, "dump.log"), env)
        for mode in ("eager", "compile"):
            out = os.path.join(args.out_dir, f"fsdp2_{mode}.json")
            cmd = [sys.executable, args.fsdp2, "--model=1b", "--device=cuda", f"--mode={mode}",
                   f"--weights={os.path.join(data_dir, 'weights')}", f"--batches={os.path.join(data_dir, 'batches')}",
                   f"--steps={args.steps - args.warmup}", f"--warmup={args.warmup}", f"--lr={args.lr}",
                   f"--out={out}"]
            # Triton builds its helpers with $CC: the GPU image's on-device.sh points CC at a
            # compiler for Bazel that Triton's build cannot use, so PyTorch runs get the default.
            torch_env = {k: v for k, v in env.items() if k not in ("CC", "CXX")}
            if run(cmd, os.path.join(args.out_dir, f"fsdp2_{mode}.log"), torch_env, timeout=1200):
                with open(out) as f:
                    s = json.load(f)
                label = "PyTorch FSDP2 eager" if mode == "eager" else "PyTorch FSDP2 + per-block torch.compile"
                results.append(fsdp2_result(label, s))
    write_table(results, args.out_dir)


def write_table(results, out_dir):
    """Prints the Markdown table of `results` and writes table.md and results.json into out_dir."""
    # One statistic for every row: the median of the timed steps (a step at the GPU's power
    # cap now and then runs ~10% long; the mean is shown beside it).
    # J/step: the GPU's energy from before the first timed step to after the last (NVML), per
    # step; the window also holds the loop's work between steps, whose share is the window's
    # time beyond the steps' ("between steps"). Average W over that window (the enforced limit).
    table = fsdp_1b_table(results)
    print("\n" + table, end="")
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
