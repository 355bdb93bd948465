#!/usr/bin/env python3
"""Prints a Markdown table of `magi simulate` over pass pipelines applied to one step graph.

For each pipeline ("" is the graph as given): `magi opt` with it, then `magi simulate` of the
result: its collectives, predicted step time, exposed communication (and how much of the
communication the compute hides) and peak memory. Part 2 of the blog ("FSDP as one graph")
shows this table:
  python3 docs/blog/figures/simulate_table.py --magi bazel-bin/magi/tools/magi \
      --mir magi/passes/testdata/llama4_fsdp_step.mir --device h200 --world 8 \
      --pipeline= --pipeline='schedule-overlap{prefetch=2}'
Standard library only.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def simulate(args, pipeline, tmp):
    graph = args.mir
    if pipeline:
        graph = os.path.join(tmp, "optimized.mir")
        opt = subprocess.run([args.magi, "opt", args.mir, "--passes=" + pipeline, "-o", graph],
                             capture_output=True, text=True)
        if opt.returncode != 0:
            sys.exit("magi opt --passes=%s failed: %s" % (pipeline, opt.stderr.strip()))
    sim = subprocess.run([args.magi, "simulate", graph, "--device=" + args.device, "--world=%d" % args.world],
                         capture_output=True, text=True)
    if sim.returncode != 0:
        sys.exit("magi simulate failed: %s" % sim.stderr.strip())
    text = sim.stdout + sim.stderr

    def number(pattern):
        m = re.search(pattern, text, re.M)
        if not m:
            sys.exit("magi simulate printed no %r:\n%s" % (pattern, text))
        return m.group(1)
    return ["`%s`" % pipeline if pipeline else "as given", number(r"(\d+) collectives"),
            number(r"^\s*step time\s+([0-9.]+ ms)"),
            "%s (%s hidden)" % (number(r"^\s*exposed communication\s+([0-9.]+ ms)"),
                                number(r"^\s*communication\s+[0-9.]+ ms \(([0-9.]+%) hidden")),
            number(r"^\s*peak memory\s+([0-9.]+ MB)")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--magi", required=True, help="the magi binary")
    parser.add_argument("--mir", required=True, help="the step graph")
    parser.add_argument("--device", default="h200")
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--pipeline", action="append", required=True, help='a pass pipeline ("" for none)')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [simulate(args, pipeline, tmp) for pipeline in args.pipeline]
    print("| pipeline | collectives | step (predicted) | exposed communication | peak memory |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
