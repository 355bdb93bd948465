#!/usr/bin/env python3
"""OpInfo conformance of the FX frontend: PyTorch's own operator database (op_db) through
export -> import -> interpreter, compared with PyTorch.

    /usr/bin/python3 tools/fx_opinfo.py --fx_run PATH/TO/fx_run --out DIR [--ops a,b,...] \\
        [--samples 3] [--modes forward,joint] [--noncontiguous]

For each op (all of op_db, or --ops by OpInfo name, "name.variant" for variants), its
first --samples float32 CPU samples, and with --noncontiguous each sample's
non-contiguous twin, are exported with tools/fx_export.py:
  forward: the op's outputs, every tensor argument a graph input;
  joint:   the loss sum(output_process_fn_grad(outputs)) over floating outputs (real and
           imaginary parts of complex ones) and the gradient of every argument that
           requires grad.
fx_run then imports each file, runs it twice with the interpreter and compares it with
PyTorch's results (outputs that change between runs count as wrong). Prints per mode the
table "pass / wrong / clear errors / export failures / skipped / total", then every wrong
case and the reasons of the rest, and exits 1 if any case is wrong (or crashes fx_run).

Needs torch.testing._internal (Debian's python3-torch ships it) and PyPI's expecttest
(tools/python_deps.sh installs it).
"""

import argparse
import collections
import itertools
import json
import os
import signal
import subprocess
import sys
import traceback

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import fx_export  # noqa: E402
from tools.fx_models import ModelSpec  # noqa: E402

# Ops whose results are uninitialized memory by design: nothing to compare.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided"}


class Skip(Exception):
    pass


class _Slot:
    def __init__(self, index):
        self.index = index


def _flatten(value, tensors):
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, (list, tuple)):
        items = [_flatten(v, tensors) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: _flatten(v, tensors) for k, v in value.items()}
    return value


def _unflatten(value, tensors):
    if isinstance(value, _Slot):
        return tensors[value.index]
    if isinstance(value, list):
        return [_unflatten(v, tensors) for v in value]
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        return tuple(_unflatten(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _unflatten(v, tensors) for k, v in value.items()}
    return value


def _output_tensors(value):
    """The tensors of an op's result, in order; Skip for results a graph cannot return."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            if v is None:
                continue
            out += _output_tensors(v)
        return out
    raise Skip("returns a %s, not tensors" % type(value).__name__)


class _OpCall(nn.Module):
    """Calls the OpInfo op on one sample; arguments that require grad are parameters (so the
    joint export differentiates them), the other tensors are forward's inputs."""

    def __init__(self, op, sample, joint):
        super().__init__()
        self.op, self.joint = op, joint
        self.process = sample.output_process_fn_grad if joint else (lambda x: x)
        tensors = []
        self.structure = _flatten((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors)
        self.param_slots, self.input_slots = [], []
        for i, t in enumerate(tensors):
            if joint and t.requires_grad:
                self.register_parameter("arg%d" % i, nn.Parameter(t.detach(), requires_grad=True))
                self.param_slots.append(i)
            else:
                self.input_slots.append(i)
        self.inputs = [tensors[i].detach() for i in self.input_slots]
        self.count = len(tensors)

    def forward(self, *inputs):
        tensors = [None] * self.count
        for i in self.param_slots:
            tensors[i] = getattr(self, "arg%d" % i)
        for i, t in zip(self.input_slots, inputs):
            tensors[i] = t
        first, args, kwargs = _unflatten(self.structure, tensors)
        return tuple(_output_tensors(self.process(self.op(first, *args, **kwargs))))


def _loss(outputs):
    terms = []
    for t in outputs:
        if not t.requires_grad:
            continue
        if t.is_complex():
            terms += [t.real.sum(), t.imag.sum()]
        elif t.is_floating_point():
            terms.append(t.sum())
    if not terms:
        raise Skip("no output is differentiable")
    return sum(terms[1:], terms[0])


def _same(a, b):
    def canon(t):
        t = torch.view_as_real(t.resolve_conj()) if t.is_complex() else t
        return torch.nan_to_num(t) if t.is_floating_point() else t
    return all(x.shape == y.shape and torch.equal(canon(x), canon(y)) for x, y in zip(a, b))


def _export_case(op, sample, mode, prefix):
    if op.name in UNINITIALIZED:
        raise Skip("its results are uninitialized memory")
    if not op.supports_dtype(torch.float32, "cpu"):
        raise Skip("the op does not support float32 on CPU")
    if mode == "joint" and (not op.supports_autograd or torch.float32 not in op.supported_backward_dtypes("cpu")):
        raise Skip("the op has no float32 CPU gradient")
    tensors = []
    _flatten((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors)
    if any(t.layout != torch.strided for t in tensors):
        raise Skip("sparse inputs")
    model = _OpCall(op, sample, mode == "joint")
    # Random ops (different results under different seeds) cannot be compared.
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            first = model(*model.inputs)
            torch.manual_seed(1)
            second = model(*model.inputs)
    except Skip:
        raise
    except Exception as error:  # the sample is invalid for the op (e.g. a non-contiguous twin)
        raise Skip("PyTorch itself rejects the sample: %s" % str(error).split("\n")[0][:120])
    if not _same(first, second):
        raise Skip("random: results depend on the generator")
    if mode == "joint":
        if not model.param_slots:
            raise Skip("no argument requires grad")
        spec = ModelSpec(model, tuple(model.inputs), lambda outputs: _loss(outputs), ())
        _loss(model(*model.inputs))  # Skip early when nothing is differentiable
    else:
        spec = ModelSpec(model, tuple(model.inputs))
    torch.manual_seed(0)
    # A graph whose result reads memory nobody initialized (fx_export.UninitializedOutput)
    # is refused by the exporter: an export failure, not a comparison. Random graphs are
    # skipped (OpInfo seeds its random ops inside the call, which no graph can carry).
    try:
        fx_export.export(spec, mode, "make_fx", prefix, allow_none_grads=True)
    except fx_export.RandomOutput as error:
        raise Skip("random: %s" % error)


def _timeout(signum, frame):
    raise TimeoutError("export took more than 60 s")


def export_all(args):
    from torch.testing._internal.common_methods_invocations import op_db
    wanted = set(args.ops.split(",")) if args.ops else None
    cases = []
    signal.signal(signal.SIGALRM, _timeout)
    for op in op_db:
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if wanted is not None and name not in wanted and op.name not in wanted:
            continue
        if wanted is not None:
            wanted.discard(name)
            wanted.discard(op.name)
        for mode in args.modes.split(","):
            try:
                samples = list(itertools.islice(
                    op.sample_inputs("cpu", torch.float32, requires_grad=(mode == "joint")), args.samples))
            except Exception as error:  # the op does not support float32 CPU samples
                cases.append({"case": "%s/%s" % (name, mode), "mode": mode, "status": "skipped",
                              "reason": "no float32 CPU samples (%s)" % type(error).__name__})
                continue
            for k, sample in enumerate(samples):
                variants = [("", sample)]
                if args.noncontiguous:
                    try:
                        variants.append(("nc", sample.noncontiguous()))
                    except Exception as error:  # e.g. sparse inputs
                        cases.append({"case": "%s/%s/%dnc" % (name, mode, k), "mode": mode, "status": "skipped",
                                      "reason": "no non-contiguous twin (%s)" % str(error).split("\n")[0][:100]})
                for tag, variant in variants:
                    case = "%s/%s/%d%s" % (name, mode, k, tag)
                    prefix = os.path.join(args.out, case.replace("/", "__").replace(".", "_"))
                    entry = {"case": case, "mode": mode, "file": prefix + ".fx.json"}
                    signal.alarm(60)
                    try:
                        _export_case(op, variant, mode, prefix)
                        entry["status"] = "exported"
                    except Skip as skip:
                        entry.update(status="skipped", reason=str(skip))
                    except Exception as error:  # anything the exporter or tracer refuses
                        message = str(error).strip().split("\n")[0][:300]
                        entry.update(status="export failure", reason="%s: %s" % (type(error).__name__, message))
                    finally:
                        signal.alarm(0)
                    cases.append(entry)
    if wanted:
        raise SystemExit("fx_opinfo: no OpInfo named %s" % ", ".join(sorted(wanted)))
    return cases


def run_all(cases, fx_run):
    """Runs fx_run over the exported files in batches. Files of a batch that got no verdict (fx_run
    crashed, was killed, or exited early: an AddressSanitizer report exits 1 before printing) are
    re-run one by one, so the failure is pinned on its case; a file that still gets no verdict is
    wrong, with the exit status and the end of fx_run's stderr as the reason. No case is left
    uncounted."""
    exported = [c for c in cases if c["status"] == "exported"]
    by_file = {c["file"]: c for c in exported}

    def run(files):
        proc = subprocess.run([fx_run, "--runs=2"] + files, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
        seen = set()
        for line in proc.stdout.splitlines():
            verdict, _, rest = line.partition(" ")
            path, _, detail = rest.partition(": ")
            if path in by_file and verdict in ("PASS", "WRONG", "ERROR"):
                case = by_file[path]
                case["status"] = {"PASS": "pass", "WRONG": "wrong", "ERROR": "clear error"}[verdict]
                case["reason"] = detail
                seen.add(path)
        return proc, [f for f in files if f not in seen]

    files = [c["file"] for c in exported]
    for start in range(0, len(files), 100):
        _, missing = run(files[start:start + 100])
        for f in missing:
            proc, still = run([f])
            if still:
                how = "killed by signal %d" % -proc.returncode if proc.returncode < 0 else \
                    "exited with status %d" % proc.returncode
                tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[:300]
                by_file[f].update(status="wrong", reason="fx_run %s without a verdict: %s" % (how, tail))
    assert not [c for c in cases if c["status"] == "exported"], "a case was left without a verdict"


def report(cases):
    columns = ["pass", "wrong", "clear error", "export failure", "skipped"]
    print("| mode | pass | wrong | clear errors | export failures | skipped | total |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode in ("forward", "joint"):
        counts = collections.Counter(c["status"] for c in cases if c["mode"] == mode)
        total = sum(counts.values())
        if total:
            print("| %s | %s | %d |" % (mode, " | ".join(str(counts.get(k, 0)) for k in columns), total))
    for status in ("wrong", "clear error", "export failure", "skipped"):
        chosen = [c for c in cases if c["status"] == status]
        if not chosen:
            continue
        print("\n%s (%d):" % (status, len(chosen)))
        for c in chosen:
            print("  %s: %s" % (c["case"], c.get("reason", "")))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fx_run", required=True, help="the fx_run binary (//magi/frontend/fx:fx_run)")
    parser.add_argument("--out", required=True, help="folder for the exported files")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all of op_db)")
    parser.add_argument("--samples", type=int, default=3, help="samples per op and mode")
    parser.add_argument("--modes", default="forward,joint")
    parser.add_argument("--noncontiguous", action="store_true", help="also each sample's non-contiguous twin")
    parser.add_argument("--json", default="", help="also write every case's result here")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    cases = export_all(args)
    run_all(cases, args.fx_run)
    report(cases)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(cases, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    wrong = sum(1 for c in cases if c["status"] == "wrong")
    print("\nfx_opinfo: %d cases, %d wrong" % (len(cases), wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
