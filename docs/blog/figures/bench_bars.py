#!/usr/bin/env python3
"""Draws the 953M-Llama H200 benchmark (docs/benchmarks/fsdp_1b_h200/2026-12-01_0907817.json) as SVG bars.

One row per run: measured ms/step as a bar, the cost model's uncalibrated prediction as a tick
(Magi rows only), peak GiB as text. The JSON is the raw output of benchmarks/fsdp_1b.py; nothing
here is typed in by hand.
  python3 docs/blog/figures/bench_bars.py docs/benchmarks/fsdp_1b_h200/2026-12-01_0907817.json -o out.svg
Standard library only; writes the SVG atomically.
"""
import argparse
import json
import os
import tempfile


def write_atomically(path, text):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(temp, 0o644)
    os.replace(temp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="953M Llama training step, one H200 (bf16, 8,192 tokens/step)")
    args = parser.parse_args()
    rows = json.load(open(args.results))
    left, bar_h, gap, top, width = 330, 22, 10, 50, 1000
    scale_max = max(max(r["ms"], r.get("predicted_ms") or 0) for r in rows) * 1.1
    scale = (width - left - 150) / scale_max
    height = top + len(rows) * (bar_h + gap) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="22" font-size="14">{args.title}</text>',
           '<text x="10" y="40" fill="#555">bar: measured ms/step (lower is better); '
           'black tick: cost model prediction (uncalibrated h200 profile); right: peak GiB</text>']
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        fill = "#1565c0" if r["label"].startswith("Magi") else "#9e9e9e"
        out.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{r["label"]}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{r["ms"] * scale:.1f}" height="{bar_h}" fill="{fill}"/>')
        label_x = left + max(r["ms"], r.get("predicted_ms") or 0) * scale + 6
        out.append(f'<text x="{label_x:.1f}" y="{y + 15}">{r["ms"]:.1f} ms</text>')
        if r.get("predicted_ms"):
            x = left + r["predicted_ms"] * scale
            out.append(f'<line x1="{x:.1f}" y1="{y - 3}" x2="{x:.1f}" y2="{y + bar_h + 3}" '
                       'stroke="black" stroke-width="2"/>')
        out.append(f'<text x="{width - 10}" y="{y + 15}" text-anchor="end">{r["peak_gib"]:.1f} GiB</text>')
    y = top + len(rows) * (bar_h + gap) + 10
    for tick in range(0, int(scale_max) + 1, 20):
        x = left + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">{tick}</text>')
    out.append(f'<text x="{left}" y="{y + 32}">ms/step</text>')
    out.append("</svg>\n")
    write_atomically(args.output, "\n".join(out))


if __name__ == "__main__":
    main()
