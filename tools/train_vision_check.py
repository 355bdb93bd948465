"""Checks a run of examples:train_vision against PyTorch on the same model, init and data.

    tools/bazel run //examples:train_vision -- --steps=40 --dump_dir=/tmp/tv_dump --out_dir=/tmp/tv
    /usr/bin/python3 tools/train_vision_check.py --dump /tmp/tv_dump --out_dir /tmp/tv --steps 4

1. Training: PyTorch's own data-parallel training (tools/fx_train_reference.py's, torch.optim.AdamW)
   of the spec's model (the same seeds as the export Magi trained, so the same initial state) on the
   batches Magi's ranks took (DUMP/batches.*: step<s>/rank<r>/input.0 and target.0), with the learning
   rate Magi used at each step (DUMP/losses.*: lrs), for --steps steps; every rank's loss must equal Magi's (losses.*, [steps, world]) within --early_tolerance for
   the first two steps and --late_tolerance after (relative to max(1, |PyTorch's loss|)), the
   tolerances of //magi/frontend/fx:fx_training_test for resnet18 (its comment says why later steps
   of a BatchNorm network under AdamW are held looser).
   The learning rate of every step must be the one the run's schedule (OUT_DIR/summary.json) gives.
2. Evaluation: the spec's forward-mode model (eval), with Magi's final weights
   (OUT_DIR/final_weights.*) loaded by load_state_dict(strict=True), on the dumped test images: its
   logits must equal those Magi's forward graph computed (test.*) within --logits_tolerance, and the
   accuracy must be the same.

Prints one line per compared step and rank, then "train_vision_check: OK ..." and exits 0, or names
what differs and exits 1.
"""

import argparse
import importlib
import json
import math
import os
import sys


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", required=True, help="the run's --dump_dir")
    parser.add_argument("--out_dir", required=True, help="the run's --out_dir (final_weights.*)")
    parser.add_argument("--spec", default="tools.fx_models:train_vision")
    parser.add_argument("--steps", type=int, default=4, help="steps of training to compare (<= the dumped batches)")
    parser.add_argument("--weight_decay", type=float, default=1e-2)
    parser.add_argument("--early_tolerance", type=float, default=1e-5)
    parser.add_argument("--late_tolerance", type=float, default=5e-3)
    parser.add_argument("--logits_tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    sys.path.insert(0, os.path.join(root, "tools"))
    sys.path.insert(0, os.path.join(root, "benchmarks", "pytorch"))
    import torch
    import fx_train_reference
    import tensor_file

    module_name, _, function = args.spec.partition(":")
    spec_fn = getattr(importlib.import_module(module_name), function)
    failures = []

    # 1. The first steps of training.
    dumped = tensor_file.read_tensors(os.path.join(args.dump, "losses"))
    losses, lrs = dumped["losses"], dumped["lrs"]
    steps, world = losses.shape
    batches = tensor_file.read_tensors(os.path.join(args.dump, "batches"))
    if args.steps > steps or "step%d/rank0/input.0" % (args.steps - 1) not in batches:
        print("train_vision_check: the dump holds fewer than --steps=%d steps" % args.steps, file=sys.stderr)
        return 1

    def batch_fn(step, rank, example, classes):
        prefix = "step%d/rank%d/" % (step, rank)
        got = [batches[prefix + "input.0"], batches[prefix + "target.0"]]
        for t, e in zip(got, example):
            if t.shape != e.shape or t.dtype != e.dtype:
                raise SystemExit("train_vision_check: %s is %s %s, the spec's model takes %s %s" %
                                 (prefix, t.dtype, list(t.shape), e.dtype, list(e.shape)))
        return got

    # The learning rates Magi used: the schedule of the run's summary, computed here.
    summary = json.load(open(os.path.join(args.out_dir, "summary.json")))
    for step in range(steps):
        t, lr, warmup = step + 1, summary["lr"], summary["warmup_steps"]
        if warmup > 0 and t <= warmup:
            want = lr * t / warmup
        elif summary["lr_schedule"] == "constant":
            want = lr
        else:
            progress = min(1.0, (t - warmup) / max(1, summary["steps"] - warmup))
            want = summary["min_lr"] + (lr - summary["min_lr"]) * 0.5 * (1 + math.cos(math.pi * progress))
        if abs(lrs[step].item() - want) > 1e-12 * max(1.0, want):
            failures.append("step %d: learning rate %.10g, the %s schedule gives %.10g" %
                            (step, lrs[step].item(), summary["lr_schedule"], want))

    records = []
    fx_train_reference.train(spec_fn, world, args.steps, lrs[0].item(), (0.9, 0.999), 1e-8, args.weight_decay, records,
                             batch_fn=batch_fn, lr_fn=lambda step: lrs[step].item())
    reference = dict(records)
    worst = 0.0
    for step in range(args.steps):
        tolerance = args.early_tolerance if step < 2 else args.late_tolerance
        for rank in range(world):
            want = reference["w%d/step%d/rank%d/loss" % (world, step, rank)].item()
            got = losses[step, rank].item()
            diff = abs(got - want) / max(1.0, abs(want))
            worst = max(worst, diff)
            verdict = "ok" if diff <= tolerance else "DIFFERS (allowed %.0e)" % tolerance
            print("step %d rank %d: Magi %.7f, PyTorch %.7f, relative difference %.1e %s" %
                  (step, rank, got, want, diff, verdict))
            if diff > tolerance:
                failures.append("step %d rank %d: loss %.7f vs PyTorch's %.7f" % (step, rank, got, want))

    # 2. The final weights, evaluated by PyTorch.
    test = tensor_file.read_tensors(os.path.join(args.dump, "test"))
    weights = tensor_file.read_tensors(os.path.join(args.out_dir, "final_weights"))
    model = spec_fn(mode="forward").model
    model.eval()
    model.load_state_dict(weights, strict=True)
    with torch.no_grad():
        logits = torch.cat([model(chunk) for chunk in test["images"].split(100)])
    scale = max(1.0, test["logits"].abs().max().item())
    logits_diff = (logits - test["logits"]).abs().max().item() / scale
    magi_correct = (test["logits"].argmax(1) == test["labels"]).sum().item()
    torch_correct = (logits.argmax(1) == test["labels"]).sum().item()
    n = test["labels"].numel()
    print("test accuracy: Magi's forward graph %d/%d, PyTorch eager with Magi's weights %d/%d; logits within %.1e" %
          (magi_correct, n, torch_correct, n, logits_diff))
    if not logits_diff <= args.logits_tolerance:
        failures.append("test logits differ by %.1e (allowed %.0e)" % (logits_diff, args.logits_tolerance))
    if magi_correct != torch_correct:
        failures.append("test accuracy %d/%d vs PyTorch's %d/%d" % (magi_correct, n, torch_correct, n))
    if failures:
        for failure in failures:
            print("train_vision_check: " + failure, file=sys.stderr)
        return 1
    print("train_vision_check: OK: %d steps x %d ranks of losses within %.1e of PyTorch's; eval logits within %.1e" %
          (args.steps, world, worst, logits_diff))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
