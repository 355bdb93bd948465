#!/usr/bin/env python3
"""tools/fx_export.py's refusals and the tensors it must cope with, run through the exporter's
command line as a user would, in a temporary folder:
- None gradients: a joint export of a model with a parameter autograd gives no gradient is an
  error naming that parameter, unless --allow_none_grads, which leaves its .grad output out (and
  PyTorch's expected value with it).
- A traced graph that does not reproduce the module's own run (a fast path eager PyTorch takes
  and tracing does not) is refused naming the first differing output, with a hint, instead of
  recording expected values the graph does not compute.
- ZeroTensor gradients (autograd's storage-less zeros, e.g. sgn's) export like any tensor."""

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
from tools.fx_export_test_models import fast_path_encoder  # noqa: E402
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


def _export(spec, *flags):
    out = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), "m")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "fx_export.py"), "--spec", spec,
                          "--out", out] + list(flags), cwd=ROOT, capture_output=True, text=True)
    return run, out


class NoneGradientTest(unittest.TestCase):
    def export(self, *flags):
        return _export("tools.fx_export_test:unused_parameter", *flags)

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


def fast_path_off_encoder(mode="forward"):
    """fast_path_encoder exported as the refusal's hint says: with the fast path off."""
    torch.backends.mha.set_fastpath_enabled(False)
    return fast_path_encoder(mode)


_HAS_FAST_PATH_SWITCH = hasattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled")


class ReproducesEagerTest(unittest.TestCase):
    def test_a_graph_that_computes_something_else_is_refused_naming_the_output(self):
        run, out = _export("tools.fx_export_test_models:grad_mode_branch")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("fx_export: the traced graph does not reproduce the module's own run on the example inputs: "
                      "'output.0' differs by up to 0.884 (0.884 relative to max(1, |PyTorch's value|)): at [0, 1] "
                      "the graph gives 0.884132, PyTorch 0; the module takes another path when run than when traced",
                      run.stderr)
        self.assertFalse(os.path.exists(out + ".fx.json"), "a refused export wrote its file")
        self.assertFalse(os.path.exists(out + ".tensors"), "a refused export wrote its tensors")

    @unittest.skipUnless(_HAS_FAST_PATH_SWITCH, "PyTorch 1.13's make_fx fails inside the fast path itself")
    def test_transformer_encoder_fast_path_is_refused_with_a_hint(self):
        run, out = _export("tools.fx_export_test_models:fast_path_encoder")
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        # Eager PyTorch leaves zeros at the padded positions ([0, 2] and [0, 3]).
        self.assertRegex(run.stderr, r"'output\.0' differs by up to [0-9.]+ \([0-9.]+ relative to max\(1, "
                                     r"\|PyTorch's value\|\)\): at \[0, [23], [0-7]\] the graph gives \S+, PyTorch 0; ")
        self.assertIn("TransformerEncoder 'encoder' is in eval mode: eager PyTorch runs its fast path there (with a "
                      "padding mask, nested tensors that leave zeros at padded positions), which the tracer does not "
                      "take; turn it off with torch.backends.mha.set_fastpath_enabled(False) before exporting",
                      run.stderr)
        self.assertFalse(os.path.exists(out + ".fx.json"), "a refused export wrote its file")

    @unittest.skipUnless(_HAS_FAST_PATH_SWITCH, "no torch.backends.mha.set_fastpath_enabled before PyTorch 2.1")
    def test_transformer_encoder_exports_with_the_fast_path_off(self):
        run, _ = _export("tools.fx_export_test:fast_path_off_encoder")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


class ZeroTensorTest(unittest.TestCase):
    def test_zero_tensor_gradient_exports_without_a_storage(self):
        run, out = _export("tools.fx_export_test_models:zero_gradient", "--mode", "joint")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(out + ".fx.json") as f:
            document = json.load(f)
        zeros = [n for n in document["nodes"] if n.get("target") == "aten::_efficientzerotensor"]
        self.assertEqual(len(zeros), 1, [n.get("target") for n in document["nodes"]])
        self.assertEqual(zeros[0]["meta"], [{"dtype": "float32", "shape": [4], "stride": [1], "storage_offset": 0,
                                             "storage": 0}])
        self.assertIn("scale.grad", document["output_names"])
        record = next(t for t in document["tensors"] if t["name"] == "expected:scale.grad")
        with open(out + ".tensors", "rb") as f:
            f.seek(record["offset"])
            self.assertEqual(f.read(record["nbytes"]), bytes(16))  # four float32 zeros


if __name__ == "__main__":
    unittest.main()
