#!/usr/bin/env python3
"""Every table in the docs is written by a command named next to it; this checks and writes them.

A table in README.md, docs/*.md or docs/blog/*.md sits in a block

    <!-- table NAME: SOURCE -->
    | ... table ... |
    <!-- end table NAME -->

and SOURCE says where it comes from:
  tools/doc_tables.py render RENDERER ARGS...
      rendered from raw output checked in beside the docs (docs/benchmarks/: the results.json
      a benchmark script wrote, an examples:train summary, a tool's own Markdown), by the same
      table functions the benchmark scripts print with (benchmarks/result_tables.py). `check`
      renders it again and fails on any difference; `write` rewrites the block.
  tools/docs_tables.sh ... (or another checked-in script)
      a command that writes or prints the table (predictions: search frontiers, planned peaks,
      the blog's magi runs). `check --run=NAME` runs a command that prints its table and
      compares; //tools:doc_tables_test does that for the cheap ones (its --run list), and
      //tools:docs_tables_test checks tools/docs_tables.sh's 4-layer frontier. The others
      (the 8B frontier, minutes of LibTorch build) are re-run by hand; `check` only makes sure
      their command is a file of the repository.
  reference
      hand-written facts (flags, op lists, version matrices): no run produced them.
  history: COMMIT (DATE): WHY
      a past run of the code of COMMIT (a commit of this repository: `check` looks it up where
      git can), kept as the record of what that code measured (a dated blog post's numbers, the
      runs before a change); the command is named in the text around it, and the current
      measurement, where one can be made here or on the lent GPU, is a rendered table beside it.
  legacy: WHY
      measured before raw outputs were kept beside the docs; the run's command is named in the
      text around it. No new ones: `check` fails when legacy and history tables together are
      more than LEGACY_LIMIT (neither can be rendered again from what is checked in).
`check` also fails on a table outside any block, so a table cannot be added without a source.

  tools/doc_tables.py check [FILES]     exit 1 on a stale rendered table or an unsourced table
  tools/doc_tables.py write [FILES]     re-render every `render` block in place (atomically)
  tools/doc_tables.py list [FILES]      every block and its source kind
  tools/doc_tables.py render RENDERER ARGS   print one table (see the renderers' --help)
Standard library only (and benchmarks/result_tables.py): runs on any python3, in CI without a build.
"""
import argparse
import glob
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import result_tables  # noqa: E402  (after the path above)

# Tables measured before their raw output was kept, legacy and history together (see the module
# docstring). Lower it as they are re-measured; never raise it.
LEGACY_LIMIT = 6

DEFAULT_DOCS = ["README.md", "docs/*.md", "docs/blog/*.md"]
START = re.compile(r"^(\s*)<!-- table ([A-Za-z0-9_.-]+): (.*) -->\s*$")
END = re.compile(r"^\s*<!-- end table ([A-Za-z0-9_.-]+) -->\s*$")
SEPARATOR = re.compile(r"^\s*\|\s*:?-{3,}")
RENDER_PREFIX = "tools/doc_tables.py render "
HISTORY = re.compile(r"^history: ([0-9a-f]{7,40}) \((\d{4}-\d\d-\d\d)[^)]*\): \S")


class DocError(Exception):
    """A problem in a doc or a raw file, with the place it was found."""


# ---------------------------------------------------------------------------------------------
# Renderers: each prints one Markdown table from files checked in under the repository root.

def _path(relative):
    path = os.path.join(ROOT, relative)
    if not os.path.isfile(path):
        raise DocError("no such file: %s" % relative)
    return path


def _path_dir(relative):
    path = os.path.join(ROOT, relative)
    if not os.path.isdir(path):
        raise DocError("no such folder: %s" % relative)
    return path


def _load_json(relative):
    try:
        with open(_path(relative)) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DocError("%s: not JSON (%s)" % (relative, e))


def _pairs(values, what):
    """["A=B", ...] -> {A: B}; the first '=' splits (labels may hold '=' after it)."""
    out = {}
    for text in values or []:
        key, sep, value = text.partition("=")
        if not sep:
            raise DocError("%s %r: expected KEY=VALUE" % (what, text))
        out[key] = value
    return out


def _label_pairs(values, what):
    """["LABEL=FILE", ...] -> [(LABEL, FILE)]; the LAST '=' splits (labels may hold '=')."""
    out = []
    for text in values or []:
        label, sep, path = text.rpartition("=")
        if not sep:
            raise DocError("%s %r: expected LABEL=FILE" % (what, text))
        out.append((label, path))
    return out


def render_fsdp_1b(args):
    rows = []
    for item in args.files:
        data = _load_json(item)
        if not isinstance(data, list):
            raise DocError("%s: expected benchmarks/fsdp_1b.py's results.json (a list of rows)" % item)
        rows += data
    for label, item in _label_pairs(args.fsdp2, "--fsdp2"):
        rows.append(result_tables.fsdp2_result(label, _load_json(item)))
    if args.rows:
        wanted = [int(i) for i in args.rows.split(",")]
        rows = [rows[i] for i in wanted]
    columns = args.columns.split(",") if args.columns else None
    try:
        return result_tables.fsdp_1b_table(rows, columns, _pairs(args.header, "--header"),
                                           _pairs(args.label, "--label"))
    except (KeyError, ValueError) as e:
        raise DocError("fsdp-1b: %s" % e)


def render_fsdp_1b_rounds(args):
    """An A/B of fsdp_1b.py runs (rows with 'variant' and 'round'): one row per variant."""
    rows = _load_json(args.file)
    variants = []
    for r in rows:
        if "variant" not in r or "round" not in r:
            raise DocError("%s: row %r has no 'variant' and 'round'" % (args.file, r.get("label")))
        if r["variant"] not in variants:
            variants.append(r["variant"])
    rounds = sorted({r["round"] for r in rows})
    labels = _pairs(args.label, "--label")
    table = []
    for variant in variants:
        mine = {r["round"]: r for r in rows if r["variant"] == variant}
        first = mine[min(mine)]
        table.append([labels.get(variant, variant)] +
                     ["%.1f / %.1f" % (mine[n]["ms"], mine[n]["mean_ms"]) if n in mine else "failed" for n in rounds] +
                     [", ".join("%.1f" % mine[n]["joules"] for n in rounds if n in mine),
                      "%.2f" % first["peak_gib"], "%.1f" % first["predicted_ms"]])
    return result_tables.markdown([args.first] + ["round %d median / mean ms" % n for n in rounds] +
                                  ["J/step (rounds)", "peak GiB", "predicted ms"], table)


def render_ab(args):
    results = _load_json(args.file)
    columns = args.columns.split(",") if args.columns else None
    try:
        return result_tables.ab_table(results, args.rounds, columns, _pairs(args.header, "--header"),
                                      _pairs(args.label, "--label"))
    except (KeyError, ValueError) as e:
        raise DocError("ab: %s" % e)


def render_cpu_ab(args):
    return result_tables.cpu_ab_table(_load_json(args.file), _pairs(args.label, "--label"))


def _first_table(lines):
    """The first Markdown table in `lines` (header, separator, rows), or []."""
    for i, line in enumerate(lines):
        if SEPARATOR.match(line) and i > 0 and lines[i - 1].lstrip().startswith("|"):
            end = i + 1
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            return lines[i - 1:end]
    return []


def render_include(args):
    with open(_path(args.file)) as f:
        table = _first_table(f.read().splitlines())
    if not table:
        raise DocError("%s holds no Markdown table" % args.file)
    rows = table[2:]
    if args.rows:
        rows = [r for r in rows if re.search(args.rows, r)]
    return "\n".join(table[:2] + rows) + "\n"


def _kernel_breakdown(relative):
    """tools/kernel_breakdown.py's result: its --json output, or its Markdown (family table and
    the 'device span ... busy ...; N kernels/copies' line)."""
    if relative.endswith(".json"):
        data = _load_json(relative)
        return {"families": {k: (v["ms"], v["count"]) for k, v in data["families"].items()},
                "busy_ms": data["busy_ms"], "span_ms": data["span_ms"], "events": data["device_events"]}
    with open(_path(relative)) as f:
        text = f.read()
    summary = re.search(r"device span ([\d.]+) ms, busy ([\d.]+) ms .*?; (\d+) kernels/copies", text)
    if not summary:
        raise DocError("%s: no 'device span ... busy ...; N kernels/copies' line" % relative)
    families = {}
    for row in _first_table(text.splitlines())[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        families[cells[0]] = (float(cells[1]), int(cells[3]))
    return {"families": families, "busy_ms": float(summary.group(2)), "span_ms": float(summary.group(1)),
            "events": int(summary.group(3))}


# The families of tools/kernel_breakdown.py, in the order the tables list them.
KERNEL_FAMILIES = ["gemm", "attention", "adamw (magi multi-tensor)", "aten elementwise, strided/broadcast",
                   "aten elementwise, vectorized", "aten copy/cast", "aten reduction", "aten fill",
                   "triton pointwise", "triton reduction", "memcpy", "memset", "other"]
ATEN_FAMILIES = ["aten elementwise, strided/broadcast", "aten elementwise, vectorized", "aten copy/cast",
                 "aten reduction", "aten fill"]


def render_kernels(args):
    columns = [(label, _kernel_breakdown(path)) for label, path in _label_pairs(args.column, "--column")]
    families = [f for f in KERNEL_FAMILIES if any(f in c["families"] for _, c in columns)]
    families += sorted({f for _, c in columns for f in c["families"]} - set(families))
    rows = []
    for family in families:
        cells = [family]
        for _, c in columns:
            got = c["families"].get(family)
            cells.append("-" if got is None else "%.1f (%d)" % got)
        rows.append(cells)
    rows.append(["**device busy / span**"] + ["%.1f / %.1f" % (c["busy_ms"], c["span_ms"]) for _, c in columns])
    return result_tables.markdown(["family: ms (kernels)"] + [label for label, _ in columns], rows)


def render_kernel_totals(args):
    rows = []
    for label, path in _label_pairs(args.row, "--row"):
        c = _kernel_breakdown(path)
        ms = lambda names: sum(c["families"].get(n, (0.0, 0))[0] for n in names)
        rows.append([label, "{:,}".format(c["events"]), "%.1f" % ms(ATEN_FAMILIES), "%.1f" % ms(["memcpy"]),
                     "%.1f" % ms(["gemm"]), "%.1f / %.1f" % (c["busy_ms"], c["span_ms"])])
    return result_tables.markdown(["step", "kernels and copies", "elementwise, copies, reductions, fills (ms)",
                                   "memcpy (ms)", "GEMM (ms)", "busy / span (ms)"], rows)


_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds_text(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return "%.3g %s" % (seconds / scale, unit)
    return "%.3g ns" % (seconds / 1e-9)


def render_gbench(args):
    """A Google Benchmark JSON (--benchmark_out=F --benchmark_out_format=json): one row per
    benchmark, its real time per iteration and, where it counts `nodes` or `ops`, per item."""
    data = _load_json(args.file)
    labels = _pairs(args.label, "--label")
    rows = []
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        seconds = b["real_time"] * _TIME_UNITS[b.get("time_unit", "ns")]
        count = next(((b[k], "" if k == "nodes" else "/op") for k in ("nodes", "ops") if k in b), None)
        rows.append([labels.get(b["name"], b["name"]), _seconds_text(seconds),
                     "{:,.0f}".format(count[0]) if count else "",
                     _seconds_text(seconds / count[0]) + count[1] if count else ""])
    if not rows:
        raise DocError("%s: no benchmarks" % args.file)
    return result_tables.markdown(["benchmark", "time", "nodes or ops", "per node or op"], rows)


def render_torch_env(args):
    """tools/torch_env.py's record of making an environment (its magi-env.json), one row each."""
    rows = []
    for label, path in _label_pairs(args.row, "--row"):
        e = _load_json(path)
        try:
            rows.append([label, "%d file%s, %s" % (e["wheels"], "" if e["wheels"] == 1 else "s", _bytes_text(e["wheel_bytes"])),
                         "%s in %.1f s" % (_bytes_text(e["downloaded_bytes"]), e["download_seconds"]),
                         _bytes_text(e["disk_bytes"]), "%.1f s" % e["total_seconds"]])
        except KeyError as error:
            raise DocError("%s: no %s (a magi-env.json of tools/torch_env.py?)" % (path, error))
    return result_tables.markdown(["environment", "wheels", "downloaded", "disk (venv)", "time to make"], rows)


def _bytes_text(count):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return "%.2f %s" % (count / scale, unit)
    return "%d B" % count


def render_log_rows(args):
    """Rows from a program's printed lines kept as they were (a test's --test_output=all log):
    each match of --regex (its named groups, in the order --column names them) is one row, in
    the log's order; --label gives the rows' first cells (with --key GROUP, each label is
    TEXT=VALUE and takes the row whose GROUP is VALUE, in the labels' order).

    Lines printed by several processes (one per rank) merge: --section's groups (e.g. the test
    name of gtest's `[ RUN ]` line) are added to every match after it, matches with the same
    --group values become one row, and each --max group takes its largest value over them (the
    worst rank); the other columns must agree. --format GROUP=%.1e prints a number its way."""
    with open(_path(args.file)) as f:
        text = f.read()
    try:
        pattern = re.compile(args.regex, re.M)
        section = re.compile(args.section, re.M) if args.section else None
    except re.error as e:
        raise DocError("log-rows: --regex or --section: %s" % e)
    columns = _label_pairs(args.column, "--column")  # (header, group) pairs: HEADER=GROUP
    formats = _pairs(args.format, "--format")
    sections = ([(m.start(), {k: v for k, v in m.groupdict().items() if v is not None}) for m in section.finditer(text)]
                if section else [])
    found = []  # each match's groups, its section's included
    for match in pattern.finditer(text):
        groups = {}
        for start, values in sections:
            if start <= match.start():
                groups = dict(values)
        groups.update({k: v for k, v in match.groupdict().items() if v is not None})
        found.append(groups)
    merged = []  # [key, groups]
    for groups in found:
        key = tuple(groups.get(g) for g in args.group) if args.group else None
        row = next((r for r in merged if key is not None and r[0] == key), None)
        if row is None:
            merged.append([key, dict(groups)])
            continue
        for name, value in groups.items():
            if name not in row[1]:  # printed by another line of the group (alternatives of --regex)
                row[1][name] = value
            elif name in args.max:
                row[1][name] = max(row[1][name], value, key=_number)
            elif row[1][name] != value and any(name == g for _, g in columns):
                raise DocError("log-rows: %s: --group %s has %r and %r for %s (give it as --max?)" % (
                    args.file, "/".join(map(str, key)), row[1].get(name), value, name))
    if args.key:
        # Each label names its row by the value of the --key group: a row the log lacks or
        # has twice is an error, and the table takes the labels' order.
        by_value = {}
        for _, groups in merged:
            value = groups.get(args.key)
            if value in by_value:
                raise DocError("log-rows: %s: two rows have %s %r (--group them?)" % (args.file, args.key, value))
            by_value[value] = groups
        labelled = []
        for label, value in _label_pairs(args.label, "--label"):
            if value not in by_value:
                raise DocError("log-rows: %s has no row with %s %r (--label %s)" % (args.file, args.key, value, label))
            labelled.append((label, by_value.pop(value)))
        if by_value:
            raise DocError("log-rows: %s: rows with %s %s have no --label" % (
                args.file, args.key, ", ".join(sorted(map(repr, by_value)))))
    elif len(merged) != len(args.label):
        raise DocError("log-rows: %s has %d row(s) of --regex matches for %d --label(s)" % (
            args.file, len(merged), len(args.label)))
    else:
        labelled = [(label, groups) for label, (_, groups) in zip(args.label, merged)]
    rows = []
    for label, groups in labelled:
        cells = [label]
        for _, group in columns:
            if group not in groups:
                raise DocError("log-rows: --column names no group of --regex or --section: %s" % group)
            value = groups[group]
            if group in formats:
                try:
                    value = formats[group] % _number(value)
                except (TypeError, ValueError) as e:
                    raise DocError("log-rows: --format %s=%s: %s" % (group, formats[group], e))
            cells.append(value)
        rows.append(cells)
    return result_tables.markdown([args.first] + [header for header, _ in columns], rows)


def _number(text):
    try:
        return float(text)
    except ValueError:
        raise DocError("log-rows: %r is not a number (--max and --format take numbers)" % text)


# examples:train's summary JSON (--summary_json): key -> (header, cell).
def _relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def _memory_budget(summary):
    """The summary's memory budget in bytes: memory_budget_bytes, or budget_bytes in summaries
    examples:train wrote before the budget had one name."""
    return summary.get("memory_budget_bytes", summary.get("budget_bytes", 0))


def _eager_difference(value):
    # null: not checked; a string: not finite ("nan", "inf": JSON has no NaN).
    return "-" if value is None else value if isinstance(value, str) else "%.1e" % value


SUMMARY_COLUMNS = {
    "loss": ("loss, first -> last", lambda s: "%.4f -> %.4f" % (s["initial_loss"], s["final_loss"])),
    "final_loss": ("final loss", lambda s: "%.5f" % s["final_loss"]),
    "eager": ("largest relative loss difference to eager",
              lambda s: _eager_difference(s.get("eager_max_relative_loss_difference"))),
    "tokens_s": ("tokens/s", lambda s: "{:,.0f}".format(s["tokens_per_s"])),
    "ms": ("ms/step", lambda s: "%.1f" % (s["step_seconds"] * 1e3)),
    "median_ms": ("ms/step (median)", lambda s: "%.1f" % (statistics.median(s["timed_step_seconds"]) * 1e3)),
    "predicted_ms": ("predicted ms", lambda s: "%.1f" % (s["predicted_step_seconds"] * 1e3)),
    "allocator_mib": ("allocator peak (device, MiB)", lambda s: "%.1f" % (s["allocator_peak_bytes"] / 2**20)),
    "pipeline": ("pipeline", lambda s: s["pipeline"] or "(none)"),
    "budget": ("memory budget", lambda s: "%.2f GB" % (_memory_budget(s) / 1e9) if _memory_budget(s) > 0
               else "none"),
    "calibration": ("calibration", lambda s: _calibration_sources(s)),
    "step_predicted": ("step predicted", lambda s: "%.1f ms" % (s["predicted_step_seconds"] * 1e3)),
    "step_measured": ("step measured", lambda s: "%.1f ms" % (s["step_seconds"] * 1e3)),
    "step_error": ("predicted vs measured", lambda s: "%+.1f%%" % (
        100 * (s["predicted_step_seconds"] - s["step_seconds"]) / s["step_seconds"])),
    "peak_predicted": ("peak predicted", lambda s: "%.3f MB" % (s["predicted_peak_memory_bytes"] / 1e6)),
    "peak_measured": ("peak measured", lambda s: "%.3f MB" % (s["peak_memory_bytes"] / 1e6)),
    "peak_beyond_plan": ("measured - predicted", lambda s: "%.3f MB" % (
        (s["peak_memory_bytes"] - s["predicted_peak_memory_bytes"]) / 1e6)),
    # examples:train's "library_device_bytes": what PyTorch's GEMM workspaces hold on the
    # device after the steps; -1 or absent: not known (a summary older than commit 7655380).
    "library_bytes": ("GEMM workspaces held", lambda s: _megabytes_or_dash(_library_bytes(s))),
    # examples:train's "predicted_library_device_bytes" (FsdpTrainer::predicted_library_device_bytes:
    # the workspaces predicted before the first step; absent in summaries older than commit 7655380).
    "library_predicted": ("GEMM workspaces predicted",
                          lambda s: _megabytes_or_dash(s.get("predicted_library_device_bytes", -1))),
    "peak_with_library_error": ("plan + predicted workspaces vs measured peak", lambda s: "-"
                                if s.get("predicted_library_device_bytes", -1) < 0 or s["peak_memory_bytes"] <= 0
                                else "%+.2f%%" % (
                                    100 * (s["predicted_peak_memory_bytes"] + s["predicted_library_device_bytes"] -
                                           s["peak_memory_bytes"]) / s["peak_memory_bytes"])),
    "peak_beyond_plan_and_library": ("measured - predicted - held", lambda s: "-" if _library_bytes(s) < 0
                                     else "%.3f MB" % ((s["peak_memory_bytes"] - s["predicted_peak_memory_bytes"] -
                                                        _library_bytes(s)) / 1e6)),
}


def _library_bytes(summary):
    # "gemm_workspace_bytes": the same number, as the first form of that change named it (2026-12-04).
    return summary.get("library_device_bytes", summary.get("gemm_workspace_bytes", -1))


def _megabytes_or_dash(value):
    return "-" if value < 0 else "%.3f MB" % (value / 1e6)


def _calibration_sources(summary):
    """Where the compile's kernel times came from (calibration by default, docs/passes.md)."""
    parts = [("%d from earlier steps", summary.get("calibrated_kernels_from_steps", 0)),
             ("%d micro-runs cached", summary.get("calibrated_kernels_cached", 0)),
             ("%d measured", summary.get("calibrated_kernels_measured", 0))]
    return ", ".join(text % n for text, n in parts if n) or "none"


def render_summaries(args):
    columns = args.columns.split(",")
    unknown = [c for c in columns if c not in SUMMARY_COLUMNS]
    if unknown:
        raise DocError("summaries: unknown column(s) %s; known: %s" % (", ".join(unknown), ", ".join(SUMMARY_COLUMNS)))
    headers = _pairs(args.header, "--header")
    rows = []
    for label, path in _label_pairs(args.row, "--row"):
        s = _load_json(path)
        try:
            rows.append([label] + [SUMMARY_COLUMNS[c][1](s) for c in columns])
        except KeyError as e:
            raise DocError("%s: no %s (an examples:train --summary_json?)" % (path, e))
    return result_tables.markdown([args.first] + [headers.get(c, SUMMARY_COLUMNS[c][0]) for c in columns], rows)


class _QuietParser(argparse.ArgumentParser):
    """Arguments in a doc are errors to report with the doc's location, not to exit on."""

    def error(self, message):
        raise DocError("bad render arguments: %s" % message)


def render_prediction_errors(args):
    """Predicted vs measured step time of runs repeated: one row per run name, one column per
    repeat (RUNS/run1, RUNS/run2, ...: folders of examples:train summaries NAME.json), and how
    many were within 10%."""
    parent = _path_dir(args.runs)
    dirs = sorted((d for d in os.listdir(parent) if re.fullmatch(r"run\d+", d)), key=lambda d: int(d[3:]))
    if not dirs:
        raise DocError("%s holds no run1, run2, ... folders" % args.runs)
    dirs = [os.path.join(args.runs, d) for d in dirs]
    rows = []
    for name in args.name:
        cells, within, measured = [name], 0, []
        for directory in dirs:
            s = _load_json(os.path.join(directory, name + ".json"))
            error = (s["predicted_step_seconds"] - s["step_seconds"]) / s["step_seconds"]
            within += abs(error) <= 0.10
            measured.append(s["step_seconds"] * 1e3)
            cells.append("%+.1f%% (%.1f / %.1f ms)" % (100 * error, s["predicted_step_seconds"] * 1e3,
                                                       s["step_seconds"] * 1e3))
        # How far identical runs' own means lie apart: what no prediction made before a run can beat.
        middle = statistics.median(measured)
        rows.append(cells + ["%d of %d" % (within, len(dirs)),
                             "%.1f-%.1f ms (%+.0f%% / %+.0f%%)" % (min(measured), max(measured),
                                                                 100 * (min(measured) - middle) / middle,
                                                                 100 * (max(measured) - middle) / middle)])
    return result_tables.markdown(["run"] + [os.path.basename(d) for d in dirs] +
                                  ["within 10%", "measured means (around their median)"], rows)


def _render_parser():
    parser = _QuietParser(prog=RENDER_PREFIX.strip(), description="print one table")
    sub = parser.add_subparsers(dest="renderer", required=True, parser_class=_QuietParser)
    p = sub.add_parser("fsdp-1b", help="benchmarks/fsdp_1b.py results.json rows")
    p.add_argument("files", nargs="*")
    p.add_argument("--fsdp2", action="append", help="LABEL=FILE: a fsdp2_llama.py --out JSON as one row")
    p.add_argument("--columns", help="column keys of result_tables.FSDP_1B_COLUMNS")
    p.add_argument("--header", action="append", help="KEY=TEXT: another header for a column")
    p.add_argument("--label", action="append", help="OLD=NEW: another label for a row")
    p.add_argument("--rows", help="comma-separated row indices (after --fsdp2 rows are appended)")
    p.set_defaults(render=render_fsdp_1b)
    p = sub.add_parser("fsdp-1b-rounds", help="fsdp_1b.py rows of an A/B (with 'variant' and 'round')")
    p.add_argument("file")
    p.add_argument("--first", default="variant", help="the first column's header")
    p.add_argument("--label", action="append", help="OLD=NEW")
    p.set_defaults(render=render_fsdp_1b_rounds)
    p = sub.add_parser("ab", help="benchmarks/inductor_settings.py results.json")
    p.add_argument("file")
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--columns", help="column keys of result_tables.AB_COLUMNS")
    p.add_argument("--header", action="append", help="KEY=TEXT")
    p.add_argument("--label", action="append", help="OLD=NEW")
    p.set_defaults(render=render_ab)
    p = sub.add_parser("cpu-ab", help="benchmarks/cpu_train_ab.py results.json")
    p.add_argument("file")
    p.add_argument("--label", action="append", help="OLD=NEW")
    p.set_defaults(render=render_cpu_ab)
    p = sub.add_parser("include", help="the first table of a tool's Markdown output, as the tool printed it")
    p.add_argument("file")
    p.add_argument("--rows", help="keep only rows matching this regular expression")
    p.set_defaults(render=render_include)
    p = sub.add_parser("kernels", help="tools/kernel_breakdown.py families, one column per breakdown")
    p.add_argument("--column", action="append", required=True, help="HEADER=FILE (.json or the tool's .md)")
    p.set_defaults(render=render_kernels)
    p = sub.add_parser("kernel-totals", help="tools/kernel_breakdown.py totals, one row per breakdown")
    p.add_argument("--row", action="append", required=True, help="LABEL=FILE")
    p.set_defaults(render=render_kernel_totals)
    p = sub.add_parser("gbench", help="a Google Benchmark JSON output, one row per benchmark")
    p.add_argument("file")
    p.add_argument("--label", action="append", help="BENCHMARK_NAME=TEXT")
    p.set_defaults(render=render_gbench)
    p = sub.add_parser("prediction-errors", help="predicted vs measured step time over repeated runs")
    p.add_argument("--name", action="append", required=True, help="a run's name (its summary is DIR/NAME.json)")
    p.add_argument("--runs", required=True, help="the folder of the repeats' folders run1, run2, ...")
    p.set_defaults(render=render_prediction_errors)
    p = sub.add_parser("torch-env", help="tools/torch_env.py's magi-env.json records, one row each")
    p.add_argument("--row", action="append", required=True, help="LABEL=FILE")
    p.set_defaults(render=render_torch_env)
    p = sub.add_parser("log-rows", help="rows from a program's printed lines (one per --regex match)")
    p.add_argument("file")
    p.add_argument("--regex", required=True, help="a Python regular expression with named groups (multiline)")
    p.add_argument("--column", action="append", required=True, help="HEADER=GROUP")
    p.add_argument("--label", action="append", required=True, help="the first cell of each row, in order")
    p.add_argument("--first", default="", help="the first column's header")
    p.add_argument("--section", help="a regular expression whose named groups apply to the matches after it")
    p.add_argument("--group", action="append", default=[], help="matches with the same values of these groups merge")
    p.add_argument("--max", action="append", default=[], help="a group that takes its largest value when merging")
    p.add_argument("--format", action="append", help="GROUP=%%-FORMAT for a number")
    p.add_argument("--key", help="each --label is TEXT=VALUE and names the row whose group KEY is VALUE")
    p.set_defaults(render=render_log_rows)
    p = sub.add_parser("summaries", help="examples:train summary JSONs, one row each")
    p.add_argument("--row", action="append", required=True, help="LABEL=FILE")
    p.add_argument("--columns", required=True, help="keys of SUMMARY_COLUMNS")
    p.add_argument("--first", default="run", help="the first column's header")
    p.add_argument("--header", action="append", help="KEY=TEXT")
    p.set_defaults(render=render_summaries)
    return parser


def render(argv):
    """The table the arguments of `tools/doc_tables.py render` describe."""
    args = _render_parser().parse_args(argv)
    return args.render(args)


# ---------------------------------------------------------------------------------------------
# The docs: blocks, unsourced tables, check and write.

class Block:
    def __init__(self, name, source, indent, start, end):
        self.name, self.source, self.indent, self.start, self.end = name, source, indent, start, end

    @property
    def kind(self):
        if self.source.startswith(RENDER_PREFIX):
            return "render"
        if self.source == "reference":
            return "reference"
        if self.source.startswith("legacy:"):
            return "legacy"
        if self.source.startswith("history:"):
            return "history"
        return "command"


def parse_doc(path, lines):
    """The blocks of one doc; raises DocError on unbalanced markers or a table outside any block."""
    blocks, open_block, names = [], None, set()
    for i, line in enumerate(lines):
        start, end = START.match(line), END.match(line)
        where = "%s:%d" % (path, i + 1)
        if start:
            if open_block:
                raise DocError("%s: block %s starts inside block %s" % (where, start.group(2), open_block.name))
            if start.group(2) in names:
                raise DocError("%s: a second block named %s" % (where, start.group(2)))
            names.add(start.group(2))
            open_block = Block(start.group(2), start.group(3).strip(), start.group(1), i, None)
        elif end:
            if not open_block or end.group(1) != open_block.name:
                raise DocError("%s: 'end table %s' without its start" % (where, end.group(1)))
            open_block.end = i
            blocks.append(open_block)
            open_block = None
        elif SEPARATOR.match(line) and i > 0 and lines[i - 1].lstrip().startswith("|") and not open_block:
            raise DocError("%s: a table outside any '<!-- table NAME: SOURCE -->' block (its header is line %d); "
                           "say where it comes from (tools/doc_tables.py's docstring lists the sources)"
                           % (where, i))
    if open_block:
        raise DocError("%s:%d: block %s never ends" % (path, open_block.start + 1, open_block.name))
    return blocks


def _split(block, path, text):
    try:
        return shlex.split(text)
    except ValueError as e:  # e.g. "No closing quotation"
        raise DocError("%s:%d: table %s: its source does not split into words: %s" % (
            path, block.start + 1, block.name, e))


def _rendered(block, path):
    words = _split(block, path, block.source[len(RENDER_PREFIX):])
    try:
        table = render(words)
    except DocError as e:
        raise DocError("%s:%d: table %s: %s" % (path, block.start + 1, block.name, e))
    return [block.indent + line if line else line for line in table.splitlines()]


def _docs(patterns):
    paths = []
    for pattern in patterns or DEFAULT_DOCS:
        found = sorted(glob.glob(os.path.join(ROOT, pattern))) or ([os.path.join(ROOT, pattern)]
                                                                    if not glob.has_magic(pattern) else [])
        paths += [os.path.relpath(p, ROOT) for p in found]
    return paths


def _read(path):
    try:
        with open(os.path.join(ROOT, path)) as f:
            return f.read().split("\n")
    except OSError as e:
        raise DocError("%s: %s" % (path, e.strerror))


def _write_atomically(path, text):
    full = os.path.join(ROOT, path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(full), prefix=".doc_tables.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, os.stat(full).st_mode & 0o777)
        os.replace(tmp, full)
    except BaseException:
        os.unlink(tmp)
        raise


def _command_output(block, path, replace):
    """What a command block's command prints (its table), run from the repository root with
    `replace` (OLD -> NEW) applied to its words (e.g. bazel-bin/magi/tools/magi -> a test's path)."""
    words = [replace.get(w, w) for w in _split(block, path, block.source)]
    if words[0].endswith(".py"):
        words = [sys.executable] + words
    result = subprocess.run(words, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise DocError("%s:%d: table %s: its command failed (exit %d): %s" % (
            path, block.start + 1, block.name, result.returncode, result.stderr.strip()[-2000:]))
    table = _first_table(result.stdout.splitlines())
    if not table:
        raise DocError("%s:%d: table %s: its command printed no table" % (path, block.start + 1, block.name))
    return [block.indent + line if line else line for line in table]


def check(paths, write=False, run=(), replace=None):
    """Returns the problems found (writing the render blocks first with write=True). Command
    blocks named in `run` are run and compared too (their commands print the table)."""
    problems, counts = [], {}
    for path in paths:
        try:
            lines = _read(path)
            blocks = parse_doc(path, lines)
        except DocError as e:
            problems.append(str(e))
            continue
        new_lines, last = [], 0
        for block in blocks:
            counts[block.kind] = counts.get(block.kind, 0) + 1
            if block.kind == "command":
                script = os.path.join(ROOT, block.source.split()[0])
                if not os.path.isfile(script):
                    problems.append("%s:%d: table %s: its command %r is no file of the repository"
                                    % (path, block.start + 1, block.name, block.source.split()[0]))
            if block.kind == "history":
                problem = _history_problem(block.source)
                if problem:
                    problems.append("%s:%d: table %s: %s" % (path, block.start + 1, block.name, problem))
            if block.kind != "render" and block.name not in run:
                continue
            try:
                table = (_rendered(block, path) if block.kind == "render"
                         else _command_output(block, path, replace or {}))
            except DocError as e:
                problems.append(str(e))
                continue
            current = lines[block.start + 1:block.end]
            if current != table:
                if write:
                    new_lines += lines[last:block.start + 1] + table
                    last = block.end
                else:
                    diff = [l for l in table if l not in current][:3] or table[:1]
                    problems.append("%s:%d: table %s is not what its %s; "
                                    "`tools/doc_tables.py write %s` rewrites it. First new lines "
                                    "that differ:\n    %s" % (
                                        path, block.start + 1, block.name,
                                        "raw output renders to" if block.kind == "render" else "command prints",
                                        path, "\n    ".join(diff)))
        if write and last:
            _write_atomically(path, "\n".join(new_lines + lines[last:]))
            print("wrote %s" % path)
    unrendered = counts.get("legacy", 0) + counts.get("history", 0)
    if unrendered > LEGACY_LIMIT:
        problems.append("%d legacy and history tables, more than LEGACY_LIMIT=%d: a new table needs its raw "
                        "output checked in and a render source" % (unrendered, LEGACY_LIMIT))
    summary = ", ".join("%d %s" % (n, kind) for kind, n in sorted(counts.items()))
    return problems, summary


def _history_problem(source):
    """Why a `history:` source is malformed or names a commit this repository lacks, or None.
    Without a git checkout (Bazel's runfiles) only the form is checked."""
    match = HISTORY.match(source)
    if not match:
        return "a history source is `history: COMMIT (YYYY-MM-DD ...): WHY`, not %r" % source
    def git(*args):
        return subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)

    try:
        # Only this repository's own checkout answers (not one ROOT happens to sit in), and a
        # shallow clone lacks old commits by design.
        top = git("rev-parse", "--show-toplevel").stdout.strip()
        if not top or os.path.realpath(top) != os.path.realpath(ROOT):
            return None
        if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            return None
        if git("cat-file", "-e", match.group(1) + "^{commit}").returncode != 0:
            return "history names commit %s, which this repository does not have" % match.group(1)
    except OSError:  # no git: the form alone was checked
        return None
    return None


def _blocks_or_none(path):
    try:
        return parse_doc(path, _read(path))
    except DocError:
        return []


def main(argv):
    if argv and argv[0] == "render":
        try:
            sys.stdout.write(render(argv[1:]))
        except DocError as e:
            sys.exit("doc_tables: %s" % e)
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["check", "write", "list"])
    parser.add_argument("docs", nargs="*", help="docs to look at (default: %s)" % " ".join(DEFAULT_DOCS))
    parser.add_argument("--root", help="the repository root the docs and raw files are under (default: this "
                                       "script's checkout)")
    parser.add_argument("--run", action="append", default=[],
                        help="also run the command block NAME and compare what it prints (repeatable)")
    parser.add_argument("--replace", action="append", default=[],
                        help="OLD=NEW: a word of --run commands to replace (e.g. a binary's path)")
    args = parser.parse_intermixed_args(argv)
    if args.root:
        global ROOT
        ROOT = os.path.abspath(args.root)
    paths = _docs(args.docs)
    if args.command == "list":
        for path in paths:
            try:
                for block in parse_doc(path, _read(path)):
                    print("%s:%d\t%s\t%s" % (path, block.start + 1, block.kind, block.name))
            except DocError as e:
                print("doc_tables: %s" % e, file=sys.stderr)
        return 0
    try:
        replace = _pairs(args.replace, "--replace")
    except DocError as e:
        parser.error(str(e))
    problems, summary = check(paths, write=args.command == "write", run=set(args.run), replace=replace)
    names = {b.name for p in paths for b in _blocks_or_none(p)}
    problems += ["--run %s: no such table" % name for name in sorted(set(args.run) - names)]
    for problem in problems:
        print("doc_tables: %s" % problem, file=sys.stderr)
    print("doc_tables: %d docs, tables: %s; %d problem(s)" % (len(paths), summary or "none", len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
