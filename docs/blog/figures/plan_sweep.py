#!/usr/bin/env python3
"""Runs `magi plan` on one step graph over a range of memory budgets and draws the result (SVG).

For each budget: the strategy search's chosen pipeline, then `magi simulate` on the planned graph
for its predicted step time, exposed communication and peak, and the number of nodes the plan
marks `remat = recompute`. Budgets the search cannot meet are kept with magi's message. Prints
a Markdown table of every run (the numbers the figure shows).
  python3 docs/blog/figures/plan_sweep.py --magi bazel-bin/magi/tools/magi --mir $PWD/step.mir \
      --budgets_mb 3,2.3,2.0,1.9,1.85,1.8 --device h200 -o sweep.svg
Standard library only; writes the SVG atomically.
"""
import argparse
import os
import re
import subprocess
import tempfile


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def field(text, name):
    m = re.search(rf"{name}\s+([0-9.]+) (ms|MB)", text)
    return float(m.group(1)) if m else None


def sweep(args):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for budget in [float(b) for b in args.budgets_mb.split(",")]:
            out = os.path.join(tmp, "planned.mir")
            plan = run([args.magi, "plan", args.mir, f"--budget_gb={budget / 1e3:g}", f"--device={args.device}", "-o", out])
            if plan.returncode != 0:
                rows.append({"budget": budget, "error": (plan.stderr or plan.stdout).strip().splitlines()[-1]})
                continue
            chosen = re.search(r"^chosen: (.*)$", plan.stdout, re.M).group(1)
            sim = run([args.magi, "simulate", out, f"--device={args.device}"])
            text = sim.stdout + sim.stderr
            recomputed = open(out).read().count("remat = recompute")
            rows.append({"budget": budget, "pipeline": chosen, "step": field(text, "step time"),
                         "exposed": field(text, "exposed communication"), "peak": field(text, "peak memory"),
                         "recomputed": recomputed})
    return rows


def svg(rows, title):
    ok = [r for r in rows if "error" not in r]
    width, height, pad = 1100, 380, 60
    panel = (width - 3 * pad) / 2
    bmin, bmax = min(r["budget"] for r in rows), max(r["budget"] for r in rows)
    pmin = min([r["peak"] for r in ok] + [bmin]) * 0.97
    pmax = max([r["peak"] for r in ok] + [bmax]) * 1.02
    smin, smax = min(r["step"] for r in ok) * 0.995, max(r["step"] for r in ok) * 1.005
    top, bottom = 60, height - 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>', f'<text x="10" y="22" font-size="14">{title}</text>']

    def x_of(b, x0):
        return x0 + (b - bmin) / (bmax - bmin) * panel

    def axes(x0, label, lo, hi, fmt):
        out.append(f'<line x1="{x0}" y1="{bottom}" x2="{x0 + panel}" y2="{bottom}" stroke="black"/>')
        out.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{bottom}" stroke="black"/>')
        out.append(f'<text x="{x0}" y="{top - 10}">{label}</text>')
        for i in range(5):
            v = lo + (hi - lo) * i / 4
            y = bottom - (v - lo) / (hi - lo) * (bottom - top)
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt.format(v)}</text>')
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + panel}" y2="{y:.1f}" stroke="#eee"/>')
        last = None
        for r in sorted(rows, key=lambda r: r["budget"], reverse=True):
            x = x_of(r["budget"], x0)
            if last is not None and last - x < 26:
                continue  # labels this close would overlap; the table has every budget
            last = x
            out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" font-size="10">{r["budget"]:g}</text>')
        out.append(f'<text x="{x0 + panel / 2}" y="{bottom + 34}" text-anchor="middle">budget (MB per rank)</text>')

    def y_of(v, lo, hi):
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    x0 = pad
    axes(x0, "predicted peak (MB): dots; budget: dashed line", pmin, pmax, "{:.2f}")
    out.append(f'<line x1="{x_of(bmin, x0):.1f}" y1="{y_of(bmin, pmin, pmax):.1f}" x2="{x_of(bmax, x0):.1f}" '
               f'y2="{y_of(bmax, pmin, pmax):.1f}" stroke="#888" stroke-dasharray="4 3"/>')
    for r in rows:
        x = x_of(r["budget"], x0)
        if "error" in r:
            out.append(f'<text x="{x:.1f}" y="{bottom - 8}" text-anchor="middle" fill="#c62828" font-size="16">x</text>')
        else:
            out.append(f'<circle cx="{x:.1f}" cy="{y_of(r["peak"], pmin, pmax):.1f}" r="4" fill="#1565c0"/>')
    x0 = 2 * pad + panel
    axes(x0, "predicted step (ms); label: nodes recomputed", smin, smax, "{:.3f}")
    for r in ok:
        x, y = x_of(r["budget"], x0), y_of(r["step"], smin, smax)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#2e7d32"/>')
        out.append(f'<text x="{x:.1f}" y="{y - 8:.1f}" text-anchor="middle" font-size="10">{r["recomputed"]}</text>')
    out.append(f'<text x="{pad}" y="{height - 12}" fill="#c62828">x: no strategy fits</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--magi", required=True)
    parser.add_argument("--mir", required=True)
    parser.add_argument("--budgets_mb", required=True)
    parser.add_argument("--device", default="h200")
    parser.add_argument("--title", default="")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    rows = sweep(args)
    print("| budget MB | chosen pipeline | step ms | exposed ms | peak MB | nodes recomputed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['budget']:g} | {r['error']} | | | | |")
        else:
            print(f"| {r['budget']:g} | `{r['pipeline']}` | {r['step']:.3f} | {r['exposed']:.3f} | {r['peak']:.3f} | {r['recomputed']} |")
    title = args.title or f"magi plan over memory budgets: {os.path.basename(args.mir)} ({args.device} profile)"
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.output)), prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write(svg(rows, title))
    os.chmod(temp, 0o644)
    os.replace(temp, args.output)


if __name__ == "__main__":
    main()
