#!/usr/bin/env python3
"""Draws the MegaKernel's timeline of one decode step (examples:generate --megakernel_timeline, a
Chrome trace with a row per SM) as an SVG: one thin lane per SM, a span per instruction colored by
its stage over the SM's whole span in light grey (waiting for counters).

  python3 docs/blog/figures/megakernel_timeline.py TRACE.json[.gz] -o step.svg [--title "..."]

Writes the SVG atomically. Standard library only.
"""
import argparse
import gzip
import json
import os
import tempfile

STAGES = [("embed", "#8d6e63"), ("qkv", "#1565c0"), ("attention", "#6a1b9a"), ("attention_part", "#8e24aa"),
          ("attention_combine", "#4a148c"), ("o_proj", "#00838f"), ("gate_up", "#2e7d32"), ("down", "#ef6c00"),
          ("logits", "#c62828"), ("argmax", "#000000")]
WAIT = "#e0e0e0"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="MegaKernel decode step")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--lane", type=float, default=4.0, help="pixels per SM")
    args = parser.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise SystemExit("%s: no spans" % args.trace)
    end = max(e["ts"] + e["dur"] for e in spans)
    sms = sorted({e["tid"] for e in spans})
    left, top = 60, 40
    scale = (args.width - left - 20) / end
    height = top + args.lane * len(sms) + 80
    colors = dict(STAGES)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (args.width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="20" font-size="14">%s (%.0f us, %d SMs)</text>' % (args.title, end, len(sms))]
    by_sm = {}
    for e in spans:
        by_sm.setdefault(e["tid"], []).append(e)
    for row, sm in enumerate(sms):
        y = top + row * args.lane
        lane = by_sm[sm]
        # The SM's span in grey (waiting for counters), its instructions on top.
        first, last = min(e["ts"] for e in lane), max(e["ts"] + e["dur"] for e in lane)
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (
            left + first * scale, y, (last - first) * scale, args.lane * 0.8, WAIT))
        for e in lane:
            if e.get("cat") == "wait":
                continue
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (
                left + e["ts"] * scale, y, max(e["dur"] * scale, 0.3), args.lane * 0.8,
                colors.get(e.get("cat"), "#90a4ae")))
    bottom = top + args.lane * len(sms) + 4
    out.append('<text x="10" y="%.1f">SM 0</text>' % (top + args.lane))
    out.append('<text x="10" y="%.1f">SM %d</text>' % (bottom - 4, sms[-1]))
    step = 500 if end > 2000 else 100
    for tick in range(0, int(end) + 1, step):
        x = left + tick * scale
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#bbb"/>' % (x, top - 4, x, bottom))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle">%d us</text>' % (x, bottom + 14, tick))
    x = left
    present = {e.get("cat") for e in spans}
    for label, fill in [stage for stage in STAGES if stage[0] in present] + [("waiting for counters", WAIT)]:
        out.append('<rect x="%d" y="%.1f" width="12" height="12" fill="%s"/>' % (x, bottom + 28, fill))
        out.append('<text x="%d" y="%.1f">%s</text>' % (x + 16, bottom + 39, label))
        x += 30 + 7 * len(label)
    out.append("</svg>\n")
    directory = os.path.dirname(os.path.abspath(args.output))
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out))
    os.chmod(temp, 0o644)
    os.replace(temp, args.output)


if __name__ == "__main__":
    main()
