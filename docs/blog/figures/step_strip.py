#!/usr/bin/env python3
"""Draws a Magi step graph (text IR, .mir) as a strip: one column per node in program order.

Lanes are FSDP groups (the node's `module` path: layers.N, everything else "root"); a node's color is
its phase (fwd / bwd / opt). Collective starts are drawn in the group's lane as tall marks (gather:
orange, reduce-scatter: red) and their waits as black marks, so one sees where each group's
communication is issued relative to the compute of every layer. Program order is Magi's schedule.
  python3 docs/blog/figures/step_strip.py step.mir -o strip.svg [--title ...]
Standard library only; writes the SVG atomically.
"""
import argparse
import os
import re
import tempfile

NODE = re.compile(r"^\s*%[^=]+=\s*([A-Za-z_][\w:.]*)\(")
MODULE = re.compile(r'module = "([^"]*)"')
PHASE = re.compile(r"phase = (fwd|bwd|opt)")
LAYER = re.compile(r"layers\.(\d+)\.")
PHASE_COLORS = {"fwd": "#1565c0", "bwd": "#6a1b9a", "opt": "#2e7d32", None: "#b0bec5"}


def group_of(line, module):
    if module:
        m = re.match(r"layers\.(\d+)", module)
        return f"layers.{m.group(1)}" if m else "root"
    m = LAYER.search(line)
    return f"layers.{m.group(1)}" if m else "root"


def parse(path):
    nodes = []
    for line in open(path):
        m = NODE.match(line)
        if not m:
            continue
        op = m.group(1)
        module = MODULE.search(line)
        phase = PHASE.search(line)
        nodes.append((op, group_of(line, module.group(1) if module else ""), phase.group(1) if phase else None))
    return nodes


def write_atomically(path, text):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".svg.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(temp, 0o644)
    os.replace(temp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mir")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--width", type=int, default=1200)
    args = parser.parse_args()
    nodes = parse(args.mir)
    if not nodes:
        raise SystemExit(f"{args.mir}: no nodes")
    # The phase of an unannotated node is the last annotated phase before it (annotations mark
    # where a phase starts; the nodes after inherit it).
    phases, current = [], None
    for _, _, phase in nodes:
        current = phase or current
        phases.append(current)
    groups = sorted({g for _, g, _ in nodes}, key=lambda g: (g != "root", int(g.split(".")[1]) if "." in g else -1))
    left, lane_h, top = 90, 26, 44
    step = (args.width - left - 20) / len(nodes)
    height = top + lane_h * len(groups) + 60
    title = args.title or os.path.basename(args.mir)
    starts = sum(op.endswith("_start") for op, _, _ in nodes)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="14">{title} ({len(nodes)} nodes, {starts} collective starts)</text>']
    lane = {g: i for i, g in enumerate(groups)}
    for g, i in lane.items():
        out.append(f'<text x="10" y="{top + i * lane_h + 16}">{g}</text>')
    for i, (op, g, _) in enumerate(nodes):
        x, y = left + i * step, top + lane[g] * lane_h
        if op.endswith("_start"):
            fill = "#ef6c00" if "all_gather" in op else "#c62828"
            out.append(f'<rect x="{x - 1:.2f}" y="{y - 2}" width="3" height="{lane_h + 2}" fill="{fill}"/>')
        elif op == "magi::wait":
            out.append(f'<rect x="{x - 1:.2f}" y="{y - 2}" width="2" height="{lane_h + 2}" fill="black"/>')
        else:
            out.append(f'<rect x="{x:.2f}" y="{y + 4}" width="{max(step, 0.4):.2f}" height="{lane_h - 10}" '
                       f'fill="{PHASE_COLORS[phases[i]]}"/>')
    y = top + lane_h * len(groups) + 8
    out.append(f'<text x="{left}" y="{y + 12}">program order (node index; the schedule) -&gt;</text>')
    x = left
    for label, fill in [("forward", PHASE_COLORS["fwd"]), ("backward", PHASE_COLORS["bwd"]),
                        ("optimizer", PHASE_COLORS["opt"]), ("all-gather start", "#ef6c00"),
                        ("reduce-scatter start", "#c62828"), ("wait", "black")]:
        out.append(f'<rect x="{x}" y="{y + 24}" width="12" height="12" fill="{fill}"/>')
        out.append(f'<text x="{x + 16}" y="{y + 35}">{label}</text>')
        x += 40 + 7 * len(label)
    out.append("</svg>\n")
    write_atomically(args.output, "\n".join(out))


if __name__ == "__main__":
    main()
