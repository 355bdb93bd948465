#!/usr/bin/env python3
"""tools/fx_export.py's refusal of None gradients: a joint export of a model with a parameter
autograd gives no gradient is an error naming that parameter, unless --allow_none_grads,
which leaves its .grad output out (and PyTorch's expected value with it). Runs the exporter's
command line as a user would, in a temporary folder."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tools.fx_models import _small_spec  # noqa: E402


class _Unused(nn.Module):
    """`head` is trained; `spare` never takes part in forward, so autograd gives it None."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)
        self.spare = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(x)


def unused_parameter(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_Unused(), mode, torch.randn(2, 4), 3)


class NoneGradientTest(unittest.TestCase):
    def export(self, *flags):
        out = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), "m")
        run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "fx_export.py"),
                              "--spec", "tools.fx_export_test:unused_parameter", "--out", out] + list(flags),
                             cwd=ROOT, capture_output=True, text=True)
        return run, out

    def test_joint_export_names_the_parameters_without_a_gradient(self):
        run, out = self.export("--mode", "joint")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("fx_export: parameter(s) 'spare.weight', 'spare.bias': no gradient reaches them (autograd "
                      "gives None); pass --allow_none_grads to leave 'spare.weight.grad', 'spare.bias.grad' out",
                      run.stderr)
        self.assertFalse(os.path.exists(out + ".fx.json"), "a refused export wrote its file")

    def test_allow_none_grads_leaves_their_outputs_out(self):
        run, out = self.export("--mode", "joint", "--allow_none_grads")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(out + ".fx.json") as f:
            document = json.load(f)
        self.assertEqual(document["output_names"], ["loss", "head.weight.grad", "head.bias.grad"])
        expected = sorted(t["name"] for t in document["tensors"] if t["name"].startswith("expected:"))
        self.assertEqual(expected, ["expected:head.bias.grad", "expected:head.weight.grad", "expected:loss"])
        # The unused parameters are still inputs of the graph (the state it is given).
        roles = {n["name"]: n.get("role") for n in document["nodes"] if n["op"] == "placeholder"}
        self.assertEqual(roles.get("spare.weight"), "param")

    def test_forward_export_has_no_gradients_to_miss(self):
        run, _ = self.export("--mode", "forward")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
