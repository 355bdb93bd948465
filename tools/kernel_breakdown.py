#!/usr/bin/env python3
"""Where the device time of a traced step goes: a Kineto trace summed by kernel family.

    python3 tools/kernel_breakdown.py step.trace.json[.gz] [--top 15] [--json out.json]

Reads a Chrome trace written by Kineto (examples:train --kernel_trace=FILE, or
torch.profiler's export_chrome_trace) and prints, as Markdown tables: the device span (first
kernel start to last end), the busy time (the union of kernel, copy and memset intervals on
all streams) and the idle time, with the idle gaps counted by length and the longest listed
with the device events around them (--gaps N); the time and count per family (GEMMs, attention, Inductor's
Triton kernels by kind, ATen elementwise and reductions, Magi's multi-tensor AdamW, NCCL,
copies); and the most expensive kernels by name. Families are name patterns (FAMILIES below:
the first that matches wins), so the split is as good as the kernel names; "other" lists what
none matched. With --edges N, also the step's two edges on one timeline: the first and last N
host events (ATen ops, CUDA runtime and driver calls) and device events, in microseconds from
the first host event, to show what the device waits for before its first kernel and after its
last (a CUDA-graph step is one launch: its edges are the host work around it). No PyTorch needed.
"""
import argparse
import collections
import gzip
import json
import re
import sys

# (family, regex on the kernel name), first match wins.
FAMILIES = [
    ("nccl", r"nccl"),
    ("adamw (magi multi-tensor)", r"MultiTensorAdamW"),
    ("adamw (aten fused)", r"fused_adamw|FusedAdam|multi_tensor_apply.*[Aa]dam"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn.*(mha|attn)|cutlass.*(mha|attn)|generated_.*sdpa"),
    ("gemm", r"gemm|nvjet|xmma|cutlass|cublas|_mm_|wgmma|matmul"),
    ("triton pointwise", r"^triton_poi"),
    ("triton reduction", r"^triton_(red|per)"),
    ("triton template", r"^triton_tem"),
    ("triton other", r"^triton"),
    ("aten reduction", r"reduce_kernel|Reduce|SoftMax|softmax|norm_kernel|cross_entropy|nll_loss"),
    ("aten copy/cast", r"copy_kernel|direct_copy|CatArray|index_select|gather|scatter"),
    ("aten fill", r"FillFunctor"),
    # TensorIterator's general path (broadcast or strided operands: per-element offsets)
    # against its contiguous vectorized one.
    ("aten elementwise, strided/broadcast", r"at::native::elementwise_kernel<|unrolled_elementwise"),
    ("aten elementwise, vectorized", r"vectorized_elementwise"),
]
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
HOST_CATEGORIES = {"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "Operator", "Runtime", "Driver"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def family_of(name, category):
    if category in ("gpu_memcpy", "Memcpy"):
        return "memcpy"
    if category in ("gpu_memset", "Memset"):
        return "memset"
    for family, pattern in FAMILIES:
        if re.search(pattern, name):
            return family
    return "other"


def busy_time(intervals):
    """Length of the union of [start, end) intervals."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


GAP_BINS_US = (2, 5, 20, 100)  # idle gaps by length: < 2 us, 2-5, 5-20, 20-100, >= 100


def gaps(device, top):
    """The device's idle gaps (no kernel, copy or memset on any stream) between its first start
    and last end: counted and summed by length (GAP_BINS_US), and the `top` longest with the
    device events that end before and start after each (what the device waited between)."""
    events = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name", "?")) for e in device)
    found, reach, last_name = [], None, None
    for start, end, name in events:
        if reach is not None and start > reach:
            found.append((start - reach, reach, last_name, name))
        if reach is None or end >= reach:
            reach, last_name = end, name
    bins = [[0, 0.0] for _ in range(len(GAP_BINS_US) + 1)]
    for length, *_ in found:
        index = sum(1 for bound in GAP_BINS_US if length >= bound)
        bins[index][0] += 1
        bins[index][1] += length
    labels = ["< %g us" % GAP_BINS_US[0]] + ["%g-%g us" % (a, b) for a, b in zip(GAP_BINS_US, GAP_BINS_US[1:])] + \
             [">= %g us" % GAP_BINS_US[-1]]
    origin = events[0][0]
    return {
        "by_length": [{"gaps": label, "count": c, "ms": t / 1e3} for label, (c, t) in zip(labels, bins)],
        "longest": [{"us": length, "at_ms": (at - origin) / 1e3, "after": before, "before": after}
                    for length, at, before, after in sorted(found, key=lambda g: -g[0])[:top]],
    }


def breakdown(events, top_gaps=10):
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES and "dur" in e]
    if not device:
        raise ValueError("the trace has no device kernels, copies or memsets (a CPU-only trace, or Kineto "
                         "recorded no CUDA activity)")
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in device]
    span = max(end for _, end in intervals) - min(start for start, _ in intervals)
    busy = busy_time(intervals)
    families = collections.defaultdict(lambda: [0.0, 0])
    kernels = collections.defaultdict(lambda: [0.0, 0])
    streams = set()
    for e in device:
        name, dur = e.get("name", "?"), float(e["dur"])
        family = family_of(name, e.get("cat"))
        families[family][0] += dur
        families[family][1] += 1
        kernels[(family, name)][0] += dur
        kernels[(family, name)][1] += 1
        streams.add(e.get("tid"))
    return {
        "span_ms": span / 1e3,
        "busy_ms": busy / 1e3,
        "idle_ms": (span - busy) / 1e3,
        "device_events": len(device),
        "streams": len(streams),
        "families": {f: {"ms": t / 1e3, "count": c} for f, (t, c) in families.items()},
        "kernels": [{"family": f, "name": n, "ms": t / 1e3, "count": c}
                    for (f, n), (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])],
        "idle_gaps": gaps(device, top_gaps),
    }


def edges(events, count):
    """The first and last `count` events of the traced step on one timeline, host (ATen ops,
    CUDA runtime/driver calls) and device together, sorted by start: [(label, rows)], each row
    {"at_us", "us", "where", "name"} with times from the first host event."""
    rows = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category = e.get("cat")
        where = "device" if category in DEVICE_CATEGORIES else "host" if category in HOST_CATEGORIES else None
        if where is not None:
            rows.append((float(e["ts"]), float(e["dur"]), where, e.get("name", "?")))
    host = [r for r in rows if r[2] == "host"]
    if not host:
        raise ValueError("the trace has no host events (ATen ops or CUDA runtime calls) to place the edges by")
    origin = min(r[0] for r in host)
    rows.sort()
    as_dicts = lambda part: [{"at_us": t - origin, "us": d, "where": w, "name": n} for t, d, w, n in part]  # noqa: E731
    if len(rows) <= 2 * count:
        return [("whole step", as_dicts(rows))]
    return [("first %d" % count, as_dicts(rows[:count])), ("last %d" % count, as_dicts(rows[-count:]))]


def edges_markdown(parts):
    lines = []
    for label, rows in parts:
        lines += ["", f"| {label} events: at us | us | where | name |", "|---|---|---|---|"]
        short = lambda n: n if len(n) <= 80 else n[:77] + "..."  # noqa: E731
        lines += [f"| {r['at_us']:.1f} | {r['us']:.1f} | {r['where']} | `{short(r['name'])}` |" for r in rows]
    return "\n".join(lines)


def markdown(result, top):
    total = sum(v["ms"] for v in result["families"].values())
    lines = [
        f"device span {result['span_ms']:.1f} ms, busy {result['busy_ms']:.1f} ms "
        f"({100 * result['busy_ms'] / result['span_ms']:.1f}%), idle {result['idle_ms']:.1f} ms; "
        f"{result['device_events']} kernels/copies on {result['streams']} stream(s); "
        f"kernel time summed over streams {total:.1f} ms",
        "",
        "| family | ms | % of summed | count |",
        "|---|---|---|---|",
    ]
    for family, v in sorted(result["families"].items(), key=lambda kv: -kv[1]["ms"]):
        lines.append(f"| {family} | {v['ms']:.2f} | {100 * v['ms'] / total:.1f}% | {v['count']} |")
    lines += ["", f"| top {top} kernels | family | ms | count |", "|---|---|---|---|"]
    for k in result["kernels"][:top]:
        name = k["name"] if len(k["name"]) <= 90 else k["name"][:87] + "..."
        lines.append(f"| `{name}` | {k['family']} | {k['ms']:.2f} | {k['count']} |")
    idle = result.get("idle_gaps")
    if idle:
        lines += ["", "| idle gaps | count | ms |", "|---|---|---|"]
        lines += [f"| {b['gaps']} | {b['count']} | {b['ms']:.2f} |" for b in idle["by_length"]]
        if idle["longest"]:
            lines += ["", "| longest idle gaps (us) | at ms | after | before |", "|---|---|---|---|"]
            short = lambda n: n if len(n) <= 60 else n[:57] + "..."  # noqa: E731
            lines += [f"| {g['us']:.1f} | {g['at_ms']:.2f} | `{short(g['after'])}` | `{short(g['before'])}` |"
                      for g in idle["longest"]]
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", default="", help="also write the breakdown as JSON here")
    parser.add_argument("--gaps", type=int, default=10, help="list this many of the longest idle gaps")
    parser.add_argument("--edges", type=int, default=0,
                        help="also list the step's first and last N events, host and device together")
    args = parser.parse_args(argv[1:])
    try:
        if args.gaps < 0:
            raise ValueError("--gaps must be 0 or more, got %d" % args.gaps)
        if args.edges < 0:
            raise ValueError("--edges must be 0 or more, got %d" % args.edges)
        events = load(args.trace)
        result = breakdown(events, args.gaps)
        if args.edges:
            result["edges"] = [{"part": label, "events": rows} for label, rows in edges(events, args.edges)]
    except (OSError, ValueError, KeyError) as e:
        print(f"kernel_breakdown.py: {args.trace}: {e}", file=sys.stderr)
        return 1
    print(markdown(result, args.top))
    if args.edges:
        print(edges_markdown([(part["part"], part["events"]) for part in result["edges"]]))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        import os
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
