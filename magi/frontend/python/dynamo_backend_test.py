"""torch.compile(backend="magi") against eager PyTorch, forward and backward, on CPU
(magi_py_test runs it with the package //magi/frontend/python:pkg on the path)."""

import unittest
import warnings

import torch
import torch._dynamo

import magi


def _clone_inputs(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class DynamoBackendTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()
        torch.manual_seed(0)

    def test_forward_inference_is_bitwise_eager(self):
        model = MLP().eval()
        x = torch.randn(8, 16)
        compiled = torch.compile(model, backend="magi", dynamic=False)
        with torch.no_grad():
            self.assertTrue(torch.equal(compiled(x), model(x)))

    def test_forward_and_backward_are_bitwise_eager(self):
        model = MLP()
        x = torch.randn(8, 16)
        compiled = torch.compile(model, backend="magi", dynamic=False)
        out = compiled(x)
        out.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(x)
        expected.square().sum().backward()
        self.assertTrue(torch.equal(out, expected))
        for got, p in zip(grads, model.parameters()):
            self.assertTrue(torch.equal(got, p.grad))

    def test_unknown_option_is_an_error_naming_it(self):
        compiled = torch.compile(MLP(), backend="magi", options={"no_such": 1})
        with self.assertRaisesRegex(Exception, "unknown option.*'no_such'"):
            compiled(torch.randn(2, 16))

    def test_refused_graph_names_the_node(self):
        def f(x):
            return torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,))

        compiled = torch.compile(f, backend="magi", dynamic=False)
        with self.assertRaisesRegex(Exception, r"node 'cond'.*unsupported call target"):
            compiled(torch.randn(4))

    def test_symbolic_shapes_are_refused(self):
        compiled = torch.compile(MLP().eval(), backend="magi", dynamic=True)
        with self.assertRaisesRegex(Exception, "symbolic shapes.*dynamic=False"):
            with torch.no_grad():
                compiled(torch.randn(8, 16))

    def test_mode_is_refused(self):
        compiled = torch.compile(MLP(), backend="magi", mode="max-autotune")
        with self.assertRaisesRegex(Exception, "takes no mode"):
            compiled(torch.randn(2, 16))

    def test_options_reach_the_compiler(self):
        compiled = torch.compile(MLP().eval(), backend="magi", dynamic=False, options={"deterministic": True})
        if not torch.are_deterministic_algorithms_enabled():
            with self.assertRaisesRegex(Exception, "EnableDeterministicMode"):
                with torch.no_grad():
                    compiled(torch.randn(8, 16))
        self.assertIn("deterministic", magi.enable_deterministic_mode())
        torch._dynamo.reset()
        model = MLP().eval()
        x = torch.randn(8, 16)
        compiled = torch.compile(model, backend="magi", dynamic=False,
                                 options={"partitions": ["elementwise"], "deterministic": True, "passes": "dce"})
        with torch.no_grad():
            self.assertTrue(torch.equal(compiled(x), model(x)))
        bad = torch.compile(MLP().eval(), backend="magi", dynamic=False, options={"backend": "no_such_backend"})
        with self.assertRaisesRegex(Exception, "no_such_backend"):
            with torch.no_grad():
                bad(x)

    def test_graph_break_is_reported(self):
        def f(x):
            y = x.sin()
            print("side effect")  # Dynamo cannot capture print: a graph break
            return y.cos()

        compiled = torch.compile(f, backend="magi", dynamic=False)
        x = torch.randn(4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = compiled(x)
        self.assertTrue(torch.equal(result, x.sin().cos()))
        self.assertTrue(any("graph break" in str(w.message) or "broke the graph" in str(w.message) for w in caught),
                        [str(w.message) for w in caught])


if __name__ == "__main__":
    unittest.main()
