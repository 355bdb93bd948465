"""torch.compile(backend="magi") on the GPU: Dynamo's graphs of a model on CUDA compiled for the
nccl_stream backend (stream mode and CUDA graph replay) and with Inductor partitions, against
eager PyTorch on the same GPU (built with --config=cuda, run on the GPU machine; see
docs/python.md)."""

import unittest

import torch
import torch._dynamo

import magi


class Block(torch.nn.Module):
    """A pre-norm MLP block: matmuls, a reduction (RMS norm) and pointwise work for Inductor."""

    def __init__(self, dim=256):
        super().__init__()
        self.norm = torch.nn.RMSNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))


def _relative(got, expected):
    return ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


@unittest.skipUnless(torch.cuda.is_available(), "needs a GPU")
class CudaBackendsTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()
        torch.manual_seed(0)
        # fp32 matmuls in full precision on both sides: the comparison is of Magi's backends, not of TF32.
        torch.backends.cuda.matmul.allow_tf32 = False

    def _check_training_step(self, options, tolerance):
        model = Block().cuda()
        x = torch.randn(16, 256, device="cuda")
        compiled = torch.compile(model, backend="magi", dynamic=False, options=options)
        out = compiled(x)
        out.square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(x)
        expected.square().mean().backward()
        self.assertLessEqual(_relative(out, expected), tolerance, options)
        for (name, p), got in zip(model.named_parameters(), grads):
            self.assertLessEqual(_relative(got, p.grad), tolerance, (options, name))

    def test_nccl_stream_equals_eager(self):
        # The same ATen kernels on the same inputs, launched from C++: bitwise in practice, 1e-6 stated.
        self._check_training_step({"backend": "nccl_stream"}, 1e-6)

    def test_nccl_stream_with_inductor_partitions_is_within_fp32_rounding(self):
        self._check_training_step({"backend": "nccl_stream", "partitions": ["inductor"]}, 1e-4)

    def test_cuda_graph_replays_new_inputs(self):
        model = Block().cuda().eval()
        compiled = torch.compile(model, backend="magi", dynamic=False,
                                 options={"backend": "nccl_stream{cuda_graph=true}"})
        with torch.no_grad():
            for step in range(4):  # capture, then replays that must read each new input
                x = torch.randn(16, 256, device="cuda")
                self.assertLessEqual(_relative(compiled(x), model(x)), 1e-6, "step %d" % step)


if __name__ == "__main__":
    unittest.main()
