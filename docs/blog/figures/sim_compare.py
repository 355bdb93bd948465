#!/usr/bin/env python3
"""Draws several `magi simulate --trace` timelines on one common time axis (SVG).

tools/trace_to_svg.py draws one trace scaled to its own length; comparing a step before and
after a pass needs the same scale for all, and the simulator's stalls (spans named "wait" on the
compute lane) drawn in red, which is what exposed communication looks like.
  python3 docs/blog/figures/sim_compare.py LABEL=trace.json LABEL=trace.json ... -o out.svg
Standard library only; writes the SVG atomically.
"""
import argparse
import gzip
import json
import math
import os
import tempfile


def color(name, category):
    if category == "communication":
        return "#f9a825" if "all_gather" in name else "#ef6c00"
    if name == "wait" or name.startswith("magi::wait"):
        return "#c62828"
    if any(k in name for k in ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul")):
        return "#1565c0"
    return "#b0bec5"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    return names, [e for e in events if e.get("ph") == "X"]


def nice_step(span_us):
    raw = span_us / 8
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", help="LABEL=trace.json")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="Simulated step timelines (same time scale)")
    parser.add_argument("--width", type=int, default=1200)
    args = parser.parse_args()
    runs = []
    for spec in args.traces:
        label, _, path = spec.rpartition("=")
        names, spans = load(path)
        runs.append((label, names, spans))
    end = max(e["ts"] + e["dur"] for _, _, spans in runs for e in spans)
    left, lane_h, top = 120, 20, 40
    scale = (args.width - left - 20) / end
    out = ['', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="14">{args.title}</text>']
    y = top
    for label, names, spans in runs:
        length = max(e["ts"] + e["dur"] for e in spans)
        stall = sum(e["dur"] for e in spans if e["name"] == "wait")
        out.append(f'<text x="10" y="{y + 14}" font-weight="bold">{label}: {length / 1e3:.3f} ms, '
                   f'{stall / 1e3:.3f} ms stalled in waits</text>')
        y += 22
        for tid in sorted({e["tid"] for e in spans}):
            out.append(f'<text x="10" y="{y + 14}">{names.get(tid, tid)}</text>')
            for e in spans:
                if e["tid"] != tid:
                    continue
                out.append(f'<rect x="{left + e["ts"] * scale:.2f}" y="{y}" '
                           f'width="{max(e["dur"] * scale, 0.3):.2f}" height="{lane_h - 4}" '
                           f'fill="{color(e["name"], e.get("cat", ""))}"/>')
            y += lane_h
        y += 10
    tick = nice_step(end)
    t = 0.0
    while t <= end:
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">{t / 1e3:g} ms</text>')
        t += tick
    x = left
    for label, fill in [("matmul", "#1565c0"), ("other compute", "#b0bec5"), ("stalled in a wait", "#c62828"),
                        ("all-gather", "#f9a825"), ("reduce-scatter", "#ef6c00")]:
        out.append(f'<rect x="{x}" y="{y + 26}" width="12" height="12" fill="{fill}"/>')
        out.append(f'<text x="{x + 16}" y="{y + 37}">{label}</text>')
        x += 40 + 7 * len(label)
    height = y + 50
    out[0] = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" '
              'font-family="sans-serif" font-size="12">')
    out.append("</svg>\n")
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.output)), prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out))
    os.chmod(temp, 0o644)
    os.replace(temp, args.output)


if __name__ == "__main__":
    main()
