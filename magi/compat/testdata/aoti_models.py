"""The model of the AOTInductor tests, as a tools/fx_export.py spec (PyTorch 2.11+).

    python3 tools/fx_export.py --spec magi.compat.testdata.aoti_models:mlp --out /tmp/mlp

make_aoti_mlp.py compiles the same model with AOTInductor, so a test can run one graph both
through Magi's interpreter (the FX export) and through the compiled package.
"""

import collections

import torch
import torch.nn as nn

# The fields tools/fx_export.py reads (tools/fx_models.py has the same tuple).
ModelSpec = collections.namedtuple("ModelSpec", ["model", "inputs", "loss_fn", "loss_inputs", "process_groups"],
                                   defaults=(None, (), None))


def mlp(mode="forward"):
    """Linear 16->32, GELU, Linear 32->8 on a [4,16] batch; fixed seeds."""
    if mode != "forward":
        raise ValueError("the AOTInductor test model is forward-only")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    return ModelSpec(model, (torch.randn(4, 16),))
