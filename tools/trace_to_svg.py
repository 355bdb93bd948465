#!/usr/bin/env python3
"""Renders a Chrome/Perfetto trace (Magi's --trace output) as an SVG timeline.

One lane per thread (compute stream, each communication stream); spans are colored by
kind: matrix products, attention, optimizer, casts/copies, other compute, collectives.
  python3 tools/trace_to_svg.py trace.json[.gz] -o timeline.svg [--title "..."]
Writes the SVG atomically. Standard library only.
"""
import argparse
import gzip
import json
import os
import tempfile

COLORS = [("aten::mm", "#1565c0", "matmul"), ("attention", "#6a1b9a", "attention"),
          ("magi::adamw", "#2e7d32", "AdamW"), ("_to_copy", "#ef6c00", "casts/copies"),
          ("copy", "#ef6c00", None), ("magi::wait", "#c62828", "waiting for a collective"),
          ("magi::", "#f9a825", "collectives"), ("", "#90a4ae", "other compute")]


def color(name, category):
    if category == "communication":
        return "#f9a825"
    for needle, value, _ in COLORS:
        if needle in name:
            return value
    return "#90a4ae"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="Magi step timeline")
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise SystemExit(f"{args.trace}: no spans")
    end = max(e["ts"] + e["dur"] for e in spans)
    lanes = sorted({e["tid"] for e in spans})
    left, lane_h, top = 150, 28, 40
    scale = (args.width - left - 20) / end
    height = top + lane_h * len(lanes) + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="14">{args.title} ({end / 1e3:.1f} ms)</text>']
    for row, tid in enumerate(lanes):
        y = top + row * lane_h
        out.append(f'<text x="10" y="{y + 17}">{names.get(tid, tid)}</text>')
        for e in spans:
            if e["tid"] != tid:
                continue
            x, w = left + e["ts"] * scale, max(e["dur"] * scale, 0.3)
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane_h - 6}" '
                       f'fill="{color(e["name"], e.get("cat", ""))}"/>')
    y = top + lane_h * len(lanes) + 10
    for tick in range(0, int(end / 1e3) + 1, 10):
        x = left + tick * 1e3 * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">{tick} ms</text>')
    x = left
    for _, value, label in COLORS:
        if label is None:
            continue
        out.append(f'<rect x="{x}" y="{y + 26}" width="12" height="12" fill="{value}"/>')
        out.append(f'<text x="{x + 16}" y="{y + 37}">{label}</text>')
        x += 30 + 8 * len(label)
    out.append("</svg>\n")
    directory = os.path.dirname(os.path.abspath(args.output))
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out))
    os.chmod(temp, 0o644)
    os.replace(temp, args.output)


if __name__ == "__main__":
    main()
