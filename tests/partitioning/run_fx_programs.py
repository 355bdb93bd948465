"""Runs FX programs written by Magi's inductor backend with this Python's PyTorch (eager, no
Inductor): the check that a program means what its partition graph means, on every PyTorch
Magi builds against (1.13 included, which has no AOTInductor).

    python3 run_fx_programs.py DIR N

For k in 0..N-1: DIR/pK.py is a program (build(), INPUTS, OUTPUTS); DIR/pK.inI.bin the raw
contiguous bytes of input I. build() must give a torch.fx.GraphModule whose graph holds only
placeholders, call_function nodes of torch.ops.aten overloads (and operator.getitem) and the
output; running it on the inputs (made with the declared dtypes, sizes and strides) must give
outputs of the declared dtypes and sizes, whose bytes go to DIR/pK.outJ.bin.
"""

import importlib.util
import operator
import os
import sys

import numpy as np
import torch


def read(path, dtype, sizes, strides):
    data = open(path, "rb").read()
    if dtype == torch.bfloat16:
        flat = torch.from_numpy(np.frombuffer(data, dtype=np.int16).copy()).view(torch.bfloat16)
    else:
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        flat = torch.from_numpy(np.frombuffer(data, dtype=np_dtype).copy())
    # The declared strides, which may overlap (an expanded tensor has stride 0): every element
    # is written at its storage offset (overlapping elements hold equal values).
    storage = 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) if all(n > 0 for n in sizes) else 0
    base = torch.zeros(storage, dtype=dtype)
    offsets = torch.arange(max(storage, 1)).as_strided(sizes, strides).reshape(-1)
    base[offsets] = flat
    return base.as_strided(sizes, strides)


def write(path, tensor):
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    with open(path, "wb") as f:
        f.write(tensor.numpy().tobytes())


def main(directory, count):
    ops = 0
    for k in range(count):
        spec = importlib.util.spec_from_file_location("p%d" % k, os.path.join(directory, "p%d.py" % k))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        graph_module = module.build()
        assert isinstance(graph_module, torch.fx.GraphModule), type(graph_module)
        for node in graph_module.graph.nodes:
            if node.op == "call_function":
                is_aten = isinstance(node.target, torch._ops.OpOverload) and str(node.target).startswith("aten.")
                assert is_aten or node.target is operator.getitem, "p%d: %s calls %s" % (k, node.name, node.target)
                ops += is_aten
            else:
                assert node.op in ("placeholder", "output"), "p%d: %s is a %s node" % (k, node.name, node.op)
        inputs = [read(os.path.join(directory, "p%d.in%d.bin" % (k, i)), dtype, sizes, strides)
                  for i, (_, dtype, sizes, strides, _) in enumerate(module.INPUTS)]
        outputs = graph_module(*inputs)
        assert len(outputs) == len(module.OUTPUTS), (k, len(outputs), len(module.OUTPUTS))
        for j, (out, (name, dtype, sizes, strides, _)) in enumerate(zip(outputs, module.OUTPUTS)):
            assert out.dtype == dtype and list(out.shape) == sizes, (k, name, out.dtype, out.shape, dtype, sizes)
            write(os.path.join(directory, "p%d.out%d.bin" % (k, j)), out)
    print("run_fx_programs: torch %s ran %d programs (%d aten ops) with torch.fx" % (torch.__version__, count, ops))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
