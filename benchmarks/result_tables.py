"""Markdown tables of the benchmark scripts' results, in one place.

The benchmark scripts (fsdp_1b.py, generate_1b.py, inductor_settings.py, cpu_train_ab.py) print their tables
with these functions, and tools/doc_tables.py renders the tables of docs/ from the results
those scripts wrote (docs/benchmarks/*.json) with the same functions, so a table in the docs
is exactly what the run's raw output gives. Standard library only: this runs on any python3.

A table is chosen by column keys (`*_COLUMNS` below: key -> default header); a caller may
rename headers (the same quantity under an older name) and row labels, never the numbers.
"""
import statistics

FLOP_PEAK = 989e12  # H100/H200 SXM dense bf16, the MFU denominator used in the table


def flops_per_step(tokens, layers=16, dim=2048, seq=2048, params=953_223_168):
    """Model FLOPs of one step of the 953M Llama: 6 N T for the weights, plus 12 L d s T for
    attention scores and values (forward + backward)."""
    return 6 * params * tokens + 12 * layers * dim * seq * tokens


def between_steps_ms(result):
    """Per timed step, the energy window's time beyond the timed steps' own (None if unknown)."""
    each = result.get("step_ms_each") or []
    if result.get("window_s") is None or not each:
        return None
    return (1e3 * result["window_s"] - sum(each)) / len(each)


def fsdp2_result(label, summary):
    """A results.json row of benchmarks/fsdp_1b.py from benchmarks/pytorch/fsdp2_llama.py's
    output JSON (`summary`)."""
    return {"label": label, "ms": summary["ms_per_step_median"],
            "mean_ms": statistics.mean(summary["ms_per_step_all"]),
            "tokens": summary["tokens_per_s"] * summary["ms_per_step_median"] / 1e3,
            "peak_gib": summary.get("peak_gib"), "host_ms": None, "predicted_ms": None,
            "losses": summary["losses"], "step_ms_each": summary["ms_per_step_all"], **gpu_energy_of(summary)}


def gpu_energy_of(summary):
    """The GPU energy members of a run's summary (examples:train or fsdp2_llama.py: NVML read
    before the first timed step and after the last), None where not measured (-1 or absent)."""
    keys = {"joules": "gpu_joules_per_step", "window_s": "gpu_window_seconds", "watts": "gpu_average_watts",
            "limit_w": "gpu_power_limit_watts"}
    out = {}
    for key, name in keys.items():
        value = summary.get(name)
        out[key] = value if value is not None and value >= 0 else None
    return out


def _fmt(value, pattern, scale=1):
    return "-" if value is None else pattern.format(value * scale)


def _host_ms(row):
    # examples:train reports 0 host time per step where it cannot measure it (the interpreter
    # runs every op on the calling thread: there is no separate host timeline).
    value = row.get("host_ms")
    if value == 0:
        return "(not measured)"
    return _fmt(value, "{:.1f}")


def _loss_diff(row, reference):
    diff = max((abs(a - b) for a, b in zip(row["losses"], reference)), default=float("nan"))
    return f"{diff:.2e}"


def _watts(row):
    watts = _fmt(row.get("watts"), "{:.0f}")
    return watts + (f" ({row['limit_w']:.0f})" if row.get("limit_w") is not None else "")


# benchmarks/fsdp_1b.py's results.json rows: key -> (header, cell(row, reference losses)).
FSDP_1B_COLUMNS = {
    "run": ("run", lambda r, ref: r["label"]),
    "ms": ("ms/step (median)", lambda r, ref: f"{r['ms']:.1f}"),
    "mean": ("mean ms", lambda r, ref: _fmt(r.get("mean_ms"), "{:.1f}")),
    "tokens_s": ("tokens/s", lambda r, ref: f"{r['tokens'] / (r['ms'] / 1e3):,.0f}"),
    "mfu": ("MFU", lambda r, ref: f"{100 * flops_per_step(r['tokens']) / (r['ms'] / 1e3) / FLOP_PEAK:.1f}%"),
    "peak": ("peak GiB", lambda r, ref: _fmt(r.get("peak_gib"), "{:.1f}")),
    "host": ("host ms/step", lambda r, ref: _host_ms(r)),
    "predicted": ("predicted ms", lambda r, ref: _fmt(r.get("predicted_ms"), "{:.1f}")),
    "loss_diff": ("max loss diff vs first", _loss_diff),
    "joules": ("J/step", lambda r, ref: _fmt(r.get("joules"), "{:.1f}")),
    "between": ("between steps ms/step", lambda r, ref: _fmt(between_steps_ms(r), "{:.1f}")),
    "watts": ("average W (limit)", lambda r, ref: _watts(r)),
    "sm_mhz": ("SM MHz", lambda r, ref: _fmt(r.get("sm_mhz"), "{:.0f}")),
}
FSDP_1B_DEFAULT = ["run", "ms", "mean", "tokens_s", "mfu", "peak", "host", "predicted", "loss_diff", "joules",
                   "between", "watts"]


def markdown(header, rows, align=None):
    """A Markdown table: header cells, rows of cells, optional per-column alignment ('---:')."""
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _check_columns(columns, known):
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise ValueError("unknown column(s) %s; known: %s" % (", ".join(unknown), ", ".join(known)))


def fsdp_1b_table(results, columns=None, headers=None, labels=None):
    """benchmarks/fsdp_1b.py's table of `results` (its results.json rows). `columns` picks and
    orders column keys (FSDP_1B_COLUMNS); `headers` renames headers by key; `labels` renames
    row labels. The loss difference is against the first row's losses."""
    columns = columns or FSDP_1B_DEFAULT
    headers = headers or {}
    labels = labels or {}
    _check_columns(columns, FSDP_1B_COLUMNS)
    reference = results[0]["losses"] if results else []
    rows = []
    for r in results:
        cells = [FSDP_1B_COLUMNS[c][1](r, reference) for c in columns]
        if "run" in columns:
            i = columns.index("run")
            cells[i] = labels.get(cells[i], cells[i])
        rows.append(cells)
    return markdown([headers.get(c, FSDP_1B_COLUMNS[c][0]) for c in columns], rows)


def _round_cell(rounds, number):
    got = [x for x in rounds if x["round"] == number]
    if not got:
        return "failed"
    return "%.1f / %.1f" % (statistics.median(got[0]["step_ms"]), statistics.mean(got[0]["step_ms"]))


def _settings_text(entry):
    parts = ["%s=%s" % tuple(p) for p in entry.get("settings", [])] + list(entry.get("flags", []))
    parts += ["env %s=%s" % e for e in sorted(entry.get("env", {}).items())]
    return ", ".join(parts) or "(defaults)"


def _first_round(entry):
    first = [x for x in entry["rounds"] if x["round"] == 1]  # its compile was the cold one
    return first[0] if first else None


# benchmarks/inductor_settings.py's results.json: {label: {settings, flags, env, rounds}}.
AB_COLUMNS = {
    "variant": "variant",
    "settings": "Inductor settings, train flags",
    "rounds": None,  # one column per round: "round N median / mean ms"
    "all": "all rounds median ms",
    "compile": "compile s (first round)",
    "peak": "peak GiB",
    "peak_gb": "peak GiB (allocator)",  # GiB with the same bytes in GB beside it
}
AB_DEFAULT = ["variant", "settings", "rounds", "all", "compile", "peak"]


def ab_table(results, rounds, columns=None, headers=None, labels=None, order=None):
    """benchmarks/inductor_settings.py's table of `results` over `rounds` rounds (its columns by
    default; see AB_COLUMNS). `order` lists the variants (default: the file's order)."""
    columns = columns or AB_DEFAULT
    headers = headers or {}
    labels = labels or {}
    _check_columns(columns, AB_COLUMNS)
    header = []
    for c in columns:
        if c == "rounds":
            header += ["round %d median / mean ms" % (r + 1) for r in range(rounds)]
        else:
            header.append(headers.get(c, AB_COLUMNS[c]))
    rows = []
    for label in order or list(results):
        entry = results[label]
        first = _first_round(entry)
        every = [t for x in entry["rounds"] for t in x["step_ms"]]
        cells = []
        for c in columns:
            if c == "variant":
                cells.append(labels.get(label, label))
            elif c == "settings":
                cells.append(_settings_text(entry))
            elif c == "rounds":
                cells += [_round_cell(entry["rounds"], r + 1) for r in range(rounds)]
            elif c == "all":
                cells.append("%.1f" % statistics.median(every) if every else "-")
            elif c == "compile":
                cells.append("%.1f" % first["compile_s"] if first and first.get("compile_s") is not None else "-")
            elif c == "peak":
                cells.append("%.1f" % first["peak_gib"] if first else "-")
            elif c == "peak_gb":
                cells.append("%.1f (%.2f GB)" % (first["peak_gib"], first["peak_gib"] * 2**30 / 1e9) if first else "-")
        rows.append(cells)
    return markdown(header, rows)


def cpu_ab_table(results, labels=None):
    """benchmarks/cpu_train_ab.py's table of `results` (its results.json); `labels` renames."""
    labels = labels or {}
    rows = []
    for label in results["variants"]:
        runs = results["runs"][label]
        means = [r["step_ms"] for r in runs]
        steps = [t for r in runs for t in r["steps_ms"]]
        losses = sorted({"%.6f" % r["final_loss"] for r in runs})
        rows.append([labels.get(label, label), "%d" % len(means), "%.1f" % statistics.median(means),
                     "%.1f" % min(means), "%.1f" % max(means), "%.1f" % statistics.median(steps),
                     "%.1f" % (statistics.stdev(steps) if len(steps) > 1 else 0.0), ", ".join(losses)])
    return markdown(["variant", "runs", "step ms (median of run means)", "lowest run", "highest run",
                     "median step ms", "step sd ms", "final loss"], rows,
                    ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"])


# benchmarks/generate_1b.py: the GPU's peak HBM bandwidth (bytes/s) by torch.cuda.get_device_name()
# prefix, the denominator of the "share of HBM bandwidth" columns (the vendors' datasheet numbers).
HBM_PEAK_BYTES_PER_S = [
    ("NVIDIA H200", 4.8e12),             # H200 SXM (141 GB HBM3e) and H200 NVL
    ("NVIDIA H100 80GB HBM3", 3.35e12),  # H100 SXM
]


def hbm_peak_bytes_per_s(device_name):
    """The peak HBM bandwidth of a device named `device_name`, None when it is not in the table."""
    for prefix, peak in HBM_PEAK_BYTES_PER_S:
        if (device_name or "").startswith(prefix):
            return peak
    return None


def _decode_step_s(r):
    return r["decode_s"] / r["decode_steps"] if r.get("decode_steps") else None


def _per_s(count, seconds):
    return count / seconds if seconds else None


def _hbm_share(r, peak, kv):
    """Bytes a decode step must read at least (the weights once; with kv, also the cache positions the
    step attends, averaged over the steps), per step time, over the peak bandwidth."""
    step = _decode_step_s(r)
    if step is None or peak is None or r.get("weight_bytes") is None:
        return None
    return (r["weight_bytes"] + ((r.get("kv_bytes_per_step") or 0) if kv else 0)) / step / peak


def _agreement(r):
    if r.get("tokens_total") is None:
        return "-"
    if r["tokens_equal"] == r["tokens_total"]:
        return "all %d" % r["tokens_total"]
    return "%d/%d (first differs at step %d)" % (r["tokens_equal"], r["tokens_total"], r["first_divergence"])


def _logits_diff(r):
    if r.get("logits_max_diff") is None:
        return "-"
    verdict = "" if r.get("logits_ok") is None else (" ok" if r["logits_ok"] else " OVER")
    return "%.3g (%.2g%%)%s" % (r["logits_max_diff"], 100 * r["logits_rel_diff"], verdict)


# benchmarks/generate_1b.py's results.json rows: key -> (header, cell(row, peak bytes/s)).
GENERATE_1B_COLUMNS = {
    "run": ("run", lambda r, peak: r["label"]),
    "batch": ("batch", lambda r, peak: "%d" % r["batch"]),
    "prompt": ("prompt", lambda r, peak: "%d" % r["prompt_len"]),
    "ms_token": ("decode ms/token", lambda r, peak: _fmt(_decode_step_s(r), "{:.3f}", 1e3)),
    "tokens_s": ("decode tokens/s", lambda r, peak: _fmt(
        _per_s(r["batch"] * r["decode_steps"], r["decode_s"]) if r.get("decode_steps") else None, "{:,.0f}")),
    "hbm": ("HBM share (weights)", lambda r, peak: _fmt(_hbm_share(r, peak, False), "{:.1f}%", 100)),
    "hbm_kv": ("HBM share (weights + KV)", lambda r, peak: _fmt(_hbm_share(r, peak, True), "{:.1f}%", 100)),
    "prefill": ("prefill tokens/s", lambda r, peak: _fmt(_per_s(r["batch"] * r["prompt_len"], r.get("prefill_s")),
                                                         "{:,.0f}")),
    "peak": ("peak GiB", lambda r, peak: _fmt(r.get("peak_bytes"), "{:.2f}", 1 / 2**30)),
    "logits": ("first-token logits max abs diff vs fp32 (of max)", lambda r, peak: _logits_diff(r)),
    "tokens": ("greedy tokens = PyTorch eager's", lambda r, peak: _agreement(r)),
}
GENERATE_1B_DEFAULT = list(GENERATE_1B_COLUMNS)


def generate_1b_table(results, peak_bytes_per_s, columns=None, headers=None, labels=None):
    """benchmarks/generate_1b.py's table of `results` (its results.json "rows"): a failed row shows its
    error in the decode column. `peak_bytes_per_s` (None: unknown) is the HBM share's denominator."""
    columns = columns or GENERATE_1B_DEFAULT
    headers = headers or {}
    labels = labels or {}
    _check_columns(columns, GENERATE_1B_COLUMNS)
    rows = []
    for r in results:
        if r.get("failed"):
            cells = [labels.get(r["label"], r["label"]) if c == "run" else
                     GENERATE_1B_COLUMNS[c][1](r, peak_bytes_per_s) if c in ("batch", "prompt") else "-"
                     for c in columns]
            if "ms_token" in columns:
                cells[columns.index("ms_token")] = "failed: " + r["failed"]
            rows.append(cells)
            continue
        cells = [GENERATE_1B_COLUMNS[c][1](r, peak_bytes_per_s) for c in columns]
        if "run" in columns:
            i = columns.index("run")
            cells[i] = labels.get(cells[i], cells[i])
        rows.append(cells)
    align = ["---" if c in ("run", "logits", "tokens") else "---:" for c in columns]
    return markdown([headers.get(c, GENERATE_1B_COLUMNS[c][0]) for c in columns], rows, align)
