#!/usr/bin/env python3
"""Predicted vs measured step time, one log-log scatter (SVG), from the files runs wrote.

Sources, any number of each:
  --bench LABEL=results.json     benchmarks/fsdp_1b.py output (rows with predicted_ms; others skipped)
  --summary LABEL=summary.json   examples:train --summary_json (predicted_step_seconds, step_seconds)
  --table LABEL=doc.md@HEADING   the first Markdown table after the line containing HEADING, with
                                 columns "step predicted" and "step measured" (as docs/passes.md
                                 prints them from examples/predicted_vs_measured.sh)
Prints every point it draws (label, predicted ms, measured ms, ratio).
Standard library only; writes the SVG atomically.
"""
import argparse
import json
import math
import os
import re
import tempfile

COLORS = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f"]


def from_bench(path):
    return [(r["label"], r["predicted_ms"], r["ms"]) for r in json.load(open(path)) if r.get("predicted_ms")]


def from_summary(path):
    s = json.load(open(path))
    return [(s.get("pipeline") or "(none)", s["predicted_step_seconds"] * 1e3, s["step_seconds"] * 1e3)]


def from_table(spec):
    path, _, heading = spec.partition("@")
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    rows, header = [], None
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if header:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= set("- "):
            continue
        p, m = cells[header.index("step predicted")], cells[header.index("step measured")]
        rows.append((cells[0], float(p.split()[0]), float(m.split()[0])))
    if not rows:
        raise SystemExit(f"{path}: no table with step predicted/measured after '{heading}'")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", action="append", default=[])
    parser.add_argument("--summary", action="append", default=[])
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--title", default="Step time: cost model prediction vs measurement")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    groups = {}
    for kind, loader in (("bench", from_bench), ("summary", from_summary), ("table", from_table)):
        for spec in getattr(args, kind):
            label, _, source = spec.partition("=")
            groups.setdefault(label, []).extend(loader(source))
    points = [(g, name, p, m) for g, rows in groups.items() for name, p, m in rows]
    for g, name, p, m in points:
        print(f"{g} | {name} | predicted {p:.1f} ms | measured {m:.1f} ms | measured/predicted {m / p:.2f}")
    lo = 10 ** math.floor(math.log10(min(min(p, m) for _, _, p, m in points)))
    hi = 10 ** math.ceil(math.log10(max(max(p, m) for _, _, p, m in points)))
    size, left, top = 460, 70, 50
    width, height = left + size + 330, top + size + 60

    def pos(v):
        return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * size

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>', f'<text x="10" y="22" font-size="14">{args.title}</text>']
    decade = lo
    while decade <= hi:
        x, y = left + pos(decade), top + size - pos(decade)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + size}" stroke="#eee"/>')
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + size}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + size + 16}" text-anchor="middle">{decade:g}</text>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{decade:g}</text>')
        decade *= 10
    out.append(f'<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="none" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top + size}" x2="{left + size}" y2="{top}" stroke="#888" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{left + size / 2}" y="{top + size + 36}" text-anchor="middle">predicted ms/step (log)</text>')
    out.append(f'<text x="16" y="{top + size / 2}" transform="rotate(-90 16 {top + size / 2})" '
               'text-anchor="middle">measured ms/step (log)</text>')
    out.append(f'<text x="{left + size - 4}" y="{top + 14}" text-anchor="end" fill="#888">dashed: measured = predicted</text>')
    for i, (g, rows) in enumerate(groups.items()):
        c = COLORS[i % len(COLORS)]
        for _, p, m in rows:
            out.append(f'<circle cx="{left + pos(p):.1f}" cy="{top + size - pos(m):.1f}" r="4.5" fill="{c}" fill-opacity="0.8"/>')
        out.append(f'<circle cx="{left + size + 24}" cy="{top + 10 + i * 22}" r="5" fill="{c}"/>')
        out.append(f'<text x="{left + size + 34}" y="{top + 14 + i * 22}">{g} ({len(rows)})</text>')
    out.append("</svg>\n")
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.output)), prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out))
    os.chmod(temp, 0o644)
    os.replace(temp, args.output)


if __name__ == "__main__":
    main()
