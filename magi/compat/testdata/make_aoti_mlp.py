"""Makes the AOTInductor test package for //magi/compat:aoti_package_test (PyTorch 2.11+).

    python3 make_aoti_mlp.py OUT_DIR     # writes OUT_DIR/mlp.pt2 and OUT_DIR/mlp_io.pt

The MLP of aoti_models.mlp (Linear 16->32, GELU, Linear 32->8) traced by make_fx into a plain
aten-level FX graph with the parameters as graph inputs (nothing baked in, the way Magi hands
partitions over; the same graph tools/fx_export.py makes of that spec), exported with torch.export
and compiled for the CPU by torch._inductor.aoti_compile_and_package. mlp_io.pt (torch.save)
holds the graph's inputs in order, their names as tools/fx_export.py names them, and the eager
outputs: {"names": ["0.weight", "0.bias", "2.weight", "2.bias", "input.0"], "inputs": [...],
"expected": [y]}.
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
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402


def main(out_dir):
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import aoti_models

        spec = aoti_models.mlp()
        model = spec.model
        names = [name for name, _ in model.named_parameters()]

        # Parameters first, then the data: tools/fx_export.py's order for forward graphs.
        def forward(*flat):
            params, data = flat[:len(names)], flat[len(names):]
            return (torch.func.functional_call(model, dict(zip(names, params)), data),)

        inputs = [p.detach().clone() for p in model.parameters()] + list(spec.inputs)
        input_names = names + ["input.%d" % i for i in range(len(spec.inputs))]
        graph = make_fx(forward)(*inputs)
        ops = sorted({str(n.target) for n in graph.graph.nodes if n.op == "call_function"})
        expected = list(graph(*inputs))
        program = torch.export.export(graph, tuple(inputs))
        # cpp.vec_isa_ok: Inductor's probe for the CPU's vector ISA builds a tiny library that uses
        # libtorch_cpu's Sleef symbols and loads it in a Python that loaded torch RTLD_LOCAL, so
        # with PyPI's 2.11.0 and 2.12.1 wheels it always fails and the code is generated without
        # vectorization (AOTI_CPU_ISA=INVALID_VEC_ISA) unless TORCH_USE_RTLD_GLOBAL=1. True: trust
        # /proc/cpuinfo, as the C++ side (which links libtorch_cpu) can run that code.
        path = torch._inductor.aoti_compile_and_package(
            program, package_path=os.path.join(out_dir, "mlp.pt2"),
            inductor_configs={"aot_inductor.metadata": {"magi.graph": "mlp_forward"}, "cpp.vec_isa_ok": True})
        tmp = os.path.join(out_dir, ".mlp_io.pt.tmp")
        torch.save({"names": input_names, "inputs": inputs, "expected": expected}, tmp)
        os.replace(tmp, os.path.join(out_dir, "mlp_io.pt"))
        print("make_aoti_mlp: torch %s, aten ops %s -> %s" % (torch.__version__, ", ".join(ops), path))
    finally:
        shutil.rmtree(_PRIVATE, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_aoti_mlp.py OUT_DIR")
    main(sys.argv[1])
