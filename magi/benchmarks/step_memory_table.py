#!/usr/bin/env python3
"""Prints a Markdown table of step_memory_report's planned peaks, one row per set of flags.

docs/fsdp.md's tables of the 8B-shaped step's planned memory are this script's output:
  python3 magi/benchmarks/step_memory_table.py --report bazel-bin/magi/benchmarks/step_memory_report \\
      --common="--model_shape=8b --world_size=8 --batch_size=1 --seq_len=2048 --top=3" \\
      --row="before=--donate=false --caller_holds_inputs" --row="now=--donate=true" \\
      --columns=peak,optimizer_phase,live_at_end,in_place
Columns (from the report's lines): peak (the whole step's planned device peak), where (the node
after which it is reached), optimizer_phase, live_at_end, in_place (results written in place),
host_peak, host_state. Standard library only.
"""
import argparse
import re
import shlex
import subprocess
import sys

COLUMNS = {
    "peak": ("whole step (device peak)", r"peak ([0-9.]+ GB) after node"),
    "where": ("where", r"peak [0-9.]+ GB after node (\d+ \([^,)]*)"),
    "optimizer_phase": ("optimizer phase", r"optimizer phase peak ([0-9.]+ GB)"),
    "live_at_end": ("live at the end", r"live at the end ([0-9.]+ GB)"),
    "in_place": ("results written in place", r"(\d+) results written in place"),
    "host_peak": ("host peak", r"host peak ([0-9.]+ GB)"),
    "host_state": ("state on the host", r"state on the host ([0-9.]+ GB)"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", required=True, help="the step_memory_report binary")
    parser.add_argument("--common", default="", help="flags for every row")
    parser.add_argument("--row", action="append", required=True, help="LABEL=FLAGS (the first '=' splits)")
    parser.add_argument("--columns", required=True, help=",".join(COLUMNS))
    parser.add_argument("--first", default="", help="the first column's header")
    args = parser.parse_args()
    columns = args.columns.split(",")
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        parser.error("unknown column(s) %s; known: %s" % (", ".join(unknown), ", ".join(COLUMNS)))
    rows = []
    for spec in args.row:
        label, sep, flags = spec.partition("=")
        if not sep:
            parser.error("--row %r: expected LABEL=FLAGS" % spec)
        cmd = [args.report] + shlex.split(args.common) + shlex.split(flags)
        result = subprocess.run(cmd, capture_output=True, text=True)
        text = result.stdout + result.stderr
        if result.returncode != 0:
            sys.exit("%s failed (exit %d):\n%s" % (" ".join(cmd), result.returncode, text[-2000:]))
        cells = [label]
        for c in columns:
            m = re.search(COLUMNS[c][1], text)
            if not m:
                sys.exit("%s printed no %s (%r):\n%s" % (" ".join(cmd), c, COLUMNS[c][1], text[-2000:]))
            value = m.group(1)
            cells.append(value + ")" if c == "where" else value)
        rows.append(cells)
    print("| " + " | ".join([args.first] + [COLUMNS[c][0] for c in columns]) + " |")
    print("|" + "---|" * (len(columns) + 1))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
