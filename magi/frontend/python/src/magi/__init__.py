"""Magi from Python: torch.compile(model, backend="magi") and FSDP training of an nn.Module.

    import torch, magi
    compiled = torch.compile(model, backend="magi", options={"partitions": ["elementwise"]})
    loss = compiled(x).sum(); loss.backward()   # forward and backward graphs run on Magi

    # under `torchrun --nproc_per_node=2 script.py`: FSDP + AdamW on Magi, one graph per step
    result = magi.train(model, loss_fn, batches, world=2, lr=1e-3)

Importing the package registers the "magi" backend with Dynamo. The compiler and its
runtimes are Magi's C++ library (the extension module magi._C); this package only hands
Dynamo's ATen graphs to it and tensors back and forth. See docs/python.md.
"""

from ._C import MagiError, enable_deterministic_mode
from ._dynamo_backend import OPTIONS, compile_graph, magi_backend
from ._train import TrainResult, train

__all__ = ["MagiError", "OPTIONS", "TrainResult", "compile_graph", "enable_deterministic_mode", "magi_backend",
           "train"]
