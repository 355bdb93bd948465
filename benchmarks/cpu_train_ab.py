#!/usr/bin/env python3
"""examples:train on the CPU (Gloo ranks), variants side by side in ONE run: other binaries
(e.g. a build of another commit) and other environments (e.g. which BLAS LibTorch 1.13 loads).

Rounds run the variants in turn (every other round in reverse order), so a drift of the
machine's load over the run does not favour one variant. Each run trains --steps steps of the
tiny model at --world ranks; its "step ms" is the mean wall time of steps 2..N on rank 0 (what
examples:train reports). The table (printed and written to OUT_DIR/table.md) has, per variant,
the median, lowest and highest run mean, the median single step and the steps' standard
deviation over all rounds, and the final loss of each run (equal across rounds: the runs are
deterministic; across variants it shows what a change does to the numbers).

  python3 benchmarks/cpu_train_ab.py --out_dir /tmp/ab --rounds 3 \\
      --variant old=/tmp/train_old --variant new=bazel-bin/examples/train \\
      --variant ref=bazel-bin/examples/train \\
      --variant_env ref=LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/blas
"""
import argparse
import json
import os
import subprocess
import sys

from result_tables import cpu_ab_table


def split_pair(text, what):
    label, sep, value = text.partition("=")
    if not sep or not label or not value:
        raise argparse.ArgumentTypeError("%s %r: expected label=value" % (what, text))
    return label, value


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--variant", action="append", required=True, type=lambda t: split_pair(t, "variant"),
                        help="label=TRAIN_BINARY")
    parser.add_argument("--variant_env", action="append", default=[], type=lambda t: split_pair(t, "variant_env"),
                        help="label=NAME=VALUE: an environment variable for that variant's runs (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=66)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--train_flags", default="--calibration=none",
                        help="flags for every run (default: no calibration, so no run reads another's cache)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run")
    args = parser.parse_args()
    labels = [label for label, _ in args.variant]
    if len(set(labels)) != len(labels):
        parser.error("variant labels must differ")
    envs = {label: {} for label in labels}
    for label, assignment in args.variant_env:
        if label not in envs:
            parser.error("--variant_env names %r, which is no --variant" % label)
        name, _, value = assignment.partition("=")
        envs[label][name] = value
    os.makedirs(args.out_dir, exist_ok=True)

    runs = {label: [] for label in labels}
    order = list(args.variant)
    total = args.rounds * len(order)
    done = 0
    for round_index in range(args.rounds):
        for label, binary in (order if round_index % 2 == 0 else list(reversed(order))):
            done += 1
            tag = "%s_r%d" % (label, round_index + 1)
            summary = os.path.join(args.out_dir, tag + ".json")
            command = [binary, "--steps=%d" % args.steps, "--world_size=%d" % args.world, "--checkpoint=false",
                       "--out_dir=" + os.path.join(args.out_dir, tag), "--summary_json=" + summary]
            command += args.train_flags.split()
            env = dict(os.environ, **envs[label])
            print("[%d/%d] %s: %s" % (done, total, tag, " ".join(command)), file=sys.stderr, flush=True)
            with open(os.path.join(args.out_dir, tag + ".log"), "w") as log:
                result = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
            if result.returncode != 0:
                sys.exit("%s failed (exit %d): see %s" % (tag, result.returncode, log.name))
            with open(summary) as f:
                s = json.load(f)
            runs[label].append({"round": round_index + 1, "step_ms": s["step_seconds"] * 1e3,
                                "steps_ms": [t * 1e3 for t in s["timed_step_seconds"]],
                                "final_loss": s["final_loss"]})

    results = {"variants": dict(args.variant), "env": envs, "runs": runs, "steps": args.steps,
               "world": args.world, "train_flags": args.train_flags}
    table = cpu_ab_table(results)
    print(table)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
