#!/usr/bin/env python3
"""Compares two calibration tables recorded from steps (examples:train --calibration_out=F).

    tools/compare_step_tables.py BASE.csv OTHER.csv [--steps=N]

For the compute keys both tables have, it prints the compute one OTHER step runs (each key's
count in OTHER over N steps) timed by BASE's means and by OTHER's: their ratio says whether the
same kernels ran slower in OTHER's steps (e.g. a pipeline whose collectives overlap compute,
against the plain step, on shared CPU cores). Then every collective key of each table, per
step. Keys in one table only are counted. Standard library only.
"""
import argparse
import sys


def load(path):
    """{key: (mean_seconds, count)} of a table in magi/cost/calibration.h's CSV format."""
    table = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split(",", 2)
            if len(fields) != 3:
                raise ValueError("%s:%d: expected mean_seconds,count,key" % (path, number))
            key = fields[2]
            if key.startswith("working_bytes="):
                key = key.split(",", 1)[1] if "," in key else ""
            try:
                table[key] = (float(fields[0]), int(fields[1]))
            except ValueError:
                raise ValueError("%s:%d: mean_seconds or count is not a number" % (path, number))
    return table


def is_collective(key):
    return key.startswith(("magi::all_gather_start", "magi::reduce_scatter_start", "magi::all_reduce_start",
                           "magi::all_to_all_start"))


def compare(base, other, steps):
    lines = []
    shared = sorted(k for k in set(base) & set(other) if not is_collective(k))
    by_base = sum(other[k][1] * base[k][0] for k in shared) / steps
    by_other = sum(other[k][1] * other[k][0] for k in shared) / steps
    lines.append("compute keys in both: %d (only in base: %d, only in other: %d)" % (
        len(shared), sum(1 for k in base if k not in other and not is_collective(k)),
        sum(1 for k in other if k not in base and not is_collective(k))))
    ratio = by_other / by_base if by_base > 0 else float("nan")
    lines.append("compute per step at other's counts: base's times %.3f ms, other's %.3f ms (other/base %.3f)" % (
        by_base * 1e3, by_other * 1e3, ratio))
    for name, table in (("base", base), ("other", other)):
        total = 0.0
        for key in sorted(k for k in table if is_collective(k)):
            mean, count = table[key]
            total += mean * count / steps
            shown = key if len(key) <= 100 else key[:97] + "..."
            lines.append("%s collective %.3f ms x %.2f/step  %s" % (name, mean * 1e3, count / steps, shown))
        lines.append("%s collectives per step %.3f ms" % (name, total * 1e3))
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("other")
    parser.add_argument("--steps", type=int, required=True,
                        help="steps each table records (examples:train --steps=S records S - 1 with the default "
                             "--untimed_steps=1)")
    args = parser.parse_args(argv)
    if args.steps <= 0:
        parser.error("--steps must be positive")
    try:
        base, other = load(args.base), load(args.other)
    except (OSError, ValueError) as error:
        print("compare_step_tables: %s" % error, file=sys.stderr)
        return 1
    print("\n".join(compare(base, other, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
