#!/usr/bin/env python3
"""Inductor settings A/B on the 953M Llama step: which torch._inductor.config values make the
inductor step (nccl_stream + CUDA graph + inductor) faster, measured in ONE run.

Each variant is a set of the inductor backend's config.NAME options (magi/backend/inductor/
inductor_backend.h): `--partition_backends=inductor{config.combo_kernels=true}`. Settings are
part of the package key, so a variant compiles its own packages once (the first round: cold
compile time) and later rounds load them. Rounds run the variants in turn (round 2 in reverse
order), so a drift of the GPU's clocks over the run does not favour one variant; a table of the
median and mean step time per round and over all rounds is printed and written to
OUT_DIR/table.md, every timed step to OUT_DIR/results.json.

  python3 benchmarks/inductor_settings.py --train bazel-bin/examples/train --out_dir /tmp/s \\
      --variant default= --variant combo=combo_kernels=true --rounds 2
  ... --variant noreshard= --variant_flags noreshard=--reshard_after_forward=false   (other train flags)
  ... --variant lt= --variant_env lt=TORCH_BLAS_PREFER_CUBLASLT=1                    (environment)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from result_tables import ab_table


def parse_variant(text):
    """"label=name=value;name=value" -> (label, [(name, value)]); "label=" is the default."""
    label, _, settings = text.partition("=")
    pairs = []
    for item in filter(None, settings.split(";")):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise argparse.ArgumentTypeError("variant %r: settings are name=value;name=value" % text)
        pairs.append((name, value))
    if not label:
        raise argparse.ArgumentTypeError("variant %r has no label" % text)
    return label, pairs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default="bazel-bin/examples/train")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--variant", action="append", type=parse_variant, required=True,
                        help="label=name=value;name=value (Inductor settings); label= for the defaults")
    parser.add_argument("--variant_flags", action="append", default=[],
                        help="label=--flag=value[ --flag=value]: extra examples:train flags for that variant "
                             "(e.g. noreshard=--reshard_after_forward=false)")
    parser.add_argument("--variant_env", action="append", default=[],
                        help="label=NAME=VALUE: an environment variable set for that variant's runs (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    # Inductor and Triton compile with the machine's own compiler, not a build's CC/CXX.
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    env["NCCL_NVLS_ENABLE"] = "0"
    labels = [label for label, _ in args.variant]
    if len(set(labels)) != len(labels):
        parser.error("--variant labels repeat: %s" % ", ".join(labels))
    extra = {}
    for text in args.variant_flags:
        label, _, flags = text.partition("=")
        if label in extra:
            parser.error("--variant_flags for %s given twice" % label)
        extra[label] = flags.split()
    unknown = set(extra) - {label for label, _ in args.variant}
    if unknown:
        parser.error("--variant_flags for no --variant: %s" % ", ".join(sorted(unknown)))
    variant_env = {}
    for text in args.variant_env:
        label, _, assignment = text.partition("=")
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            parser.error("--variant_env %r: give label=NAME=VALUE" % text)
        variant_env.setdefault(label, {})[name] = value
    unknown = set(variant_env) - {label for label, _ in args.variant}
    if unknown:
        parser.error("--variant_env for no --variant: %s" % ", ".join(sorted(unknown)))
    results = {label: {"settings": pairs, "flags": extra.get(label, []), "env": variant_env.get(label, {}),
                       "rounds": []} for label, pairs in args.variant}
    for round_index in range(args.rounds):
        order = args.variant if round_index % 2 == 0 else list(reversed(args.variant))
        for label, pairs in order:
            spec = "inductor" + ("{%s}" % ",".join("config.%s=%s" % p for p in pairs) if pairs else "")
            tag = "%s.r%d" % (label, round_index + 1)
            summary = os.path.join(args.out_dir, tag + ".json")
            cmd = [args.train, "--model=1b", "--dtype=bf16", "--device=cuda", "--world_size=1", "--checkpoint=false",
                   "--steps=%d" % args.steps, "--untimed_steps=%d" % args.warmup, "--lr=3e-4",
                   "--device_profile=h200", "--calibration=none", "--backend=nccl_stream{cuda_graph=true}",
                   "--partition_backends=" + spec, "--out_dir=" + os.path.join(args.out_dir, tag),
                   "--summary_json=" + summary] + extra.get(label, [])
            print("+", " ".join(["%s=%s" % e for e in sorted(variant_env.get(label, {}).items())] + cmd), flush=True)
            start = time.time()
            with open(os.path.join(args.out_dir, tag + ".log"), "w") as log:
                try:
                    code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(env, **variant_env.get(label, {})),
                                          timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    code = "timeout"
            if code != 0:
                print("  FAILED (%s) after %.0f s; see %s.log" % (code, time.time() - start, tag), flush=True)
                continue
            with open(summary) as f:
                s = json.load(f)
            each = [1e3 * t for t in s["timed_step_seconds"]]
            results[label]["rounds"].append({"round": round_index + 1, "step_ms": each,
                                             "compile_s": s.get("compile_seconds"),
                                             "peak_gib": s["allocator_peak_bytes"] / 2**30,
                                             "losses": s["losses"]})
            print("  %s: median %.1f ms, mean %.1f ms, compiled in %.1f s (%.0f s in all)"
                  % (tag, statistics.median(each), statistics.mean(each), s.get("compile_seconds", float("nan")),
                     time.time() - start), flush=True)
            with open(os.path.join(args.out_dir, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
    table = ab_table(results, args.rounds, order=labels)
    print(table)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(table)
    # Numerics: every variant's losses against the first variant's first round (bf16 tolerance).
    base = results[args.variant[0][0]]["rounds"]
    if base:
        for label, _ in args.variant:
            for x in results[label]["rounds"]:
                diff = max(abs(a - b) for a, b in zip(x["losses"], base[0]["losses"]))
                print("%s round %d: max loss difference from %s round 1: %.2e" % (label, x["round"],
                                                                                args.variant[0][0], diff))
    return 0 if all(len(results[label]["rounds"]) == args.rounds for label, _ in args.variant) else 1


if __name__ == "__main__":
    sys.exit(main())
