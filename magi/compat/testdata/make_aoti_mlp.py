"""Makes the AOTInductor test package for //magi/compat:aoti_package_test (PyTorch 2.11+).

    python3 make_aoti_mlp.py OUT_DIR     # writes OUT_DIR/mlp.pt2 and OUT_DIR/mlp_io.pt

An MLP forward (Linear 16->32, GELU, Linear 32->8) traced by make_fx into a plain aten-level
FX graph with the parameters as graph inputs (nothing baked in, the way Magi hands partitions
over), exported with torch.export and compiled for the CPU by
torch._inductor.aoti_compile_and_package. mlp_io.pt (torch.save) holds the inputs and the
eager outputs of the same graph: {"inputs": [x, w1, b1, w2, b2], "expected": [y]}.
"""

import os
import shutil
import sys
import tempfile

# Everything Inductor writes goes to a private folder that is removed at the end, not to the
# shared /tmp/torchinductor_$USER: its compile cache (TORCHINDUCTOR_CACHE_DIR) and its
# precompiled headers (~0.5 GB each, placed under tempfile.gettempdir() when torch._inductor
# is imported, whatever TORCHINDUCTOR_CACHE_DIR says; seen with 2.12), so TMPDIR is set too.
_PRIVATE = tempfile.mkdtemp(prefix="magi-aoti-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_PRIVATE, "inductor")
os.environ["TMPDIR"] = _PRIVATE
tempfile.tempdir = None

import torch  # noqa: E402  (after the environment above)
import torch.nn as nn  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402


def main(out_dir):
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
        names = [name for name, _ in model.named_parameters()]

        def forward(x, *params):
            return (torch.func.functional_call(model, dict(zip(names, params)), (x,)),)

        inputs = [torch.randn(4, 16)] + [p.detach().clone() for p in model.parameters()]
        graph = make_fx(forward)(*inputs)
        ops = sorted({str(n.target) for n in graph.graph.nodes if n.op == "call_function"})
        expected = list(graph(*inputs))
        program = torch.export.export(graph, tuple(inputs))
        path = torch._inductor.aoti_compile_and_package(
            program, package_path=os.path.join(out_dir, "mlp.pt2"),
            inductor_configs={"aot_inductor.metadata": {"magi.graph": "mlp_forward"}})
        tmp = os.path.join(out_dir, ".mlp_io.pt.tmp")
        torch.save({"inputs": inputs, "expected": expected}, tmp)
        os.replace(tmp, os.path.join(out_dir, "mlp_io.pt"))
        print("make_aoti_mlp: torch %s, aten ops %s -> %s" % (torch.__version__, ", ".join(ops), path))
    finally:
        shutil.rmtree(_PRIVATE, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_aoti_mlp.py OUT_DIR")
    main(sys.argv[1])
