"""Small models for the FX exporter's and importer's tests, each the smallest reproduction of a
PyTorch behaviour the FX frontend must handle (specs for tools/fx_export.py --spec, like
tools/fx_models.py's):

  fast_path_encoder   nn.TransformerEncoder in eval mode with a padding mask: eager PyTorch takes
                      the nested-tensor fast path (zeros at padded positions), tracing does not
                      (PyTorch 2.x; 1.13's make_fx fails inside the fast path instead).
  grad_mode_branch    the same divergence in miniature, on every PyTorch: forward computes
                      something else under torch.no_grad (as the fast paths decide), and the
                      exporter's eager run is under no_grad while tracing is not.
  zero_gradient       sgn's gradient is a ZeroTensor (aten::_efficientzerotensor), a tensor
                      without storage.
  batch_norm_2x       the batch norm ops of PyTorch 2.x that declare their writes to the running
                      statistics: _batch_norm_with_update and _native_batch_norm_legit (training,
                      then inference reading the statistics the first one wrote).
"""

import torch
import torch.nn as nn

from tools.fx_models import ModelSpec, _small_spec


class _Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)

    def forward(self, x, padding_mask):
        return self.encoder(x, src_key_padding_mask=padding_mask)


def fast_path_encoder(mode="forward"):
    torch.manual_seed(0)
    model = _Encoder().eval()
    padding_mask = torch.tensor([[False, False, True, True], [False, False, False, False]])
    return ModelSpec(model, (torch.randn(2, 4, 8), padding_mask))


class _GradModeBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y if torch.is_grad_enabled() else torch.zeros_like(y)


def grad_mode_branch(mode="forward"):
    torch.manual_seed(0)
    return ModelSpec(_GradModeBranch(), (torch.randn(2, 4),))


class _ZeroGradient(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(4))
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x * torch.sgn(self.scale))


def zero_gradient(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_ZeroGradient(), mode, torch.randn(2, 4), 3)


class _BatchNorm2x(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.BatchNorm2d(3)
        self.second = nn.BatchNorm2d(3)
        with torch.no_grad():
            for bn in (self.first, self.second):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        aten = torch.ops.aten
        a, b = self.first, self.second
        y = aten._batch_norm_with_update(x, a.weight, a.bias, a.running_mean, a.running_var, 0.1, 1e-5)[0]
        y = aten._native_batch_norm_legit(y.relu(), b.weight, b.bias, b.running_mean, b.running_var, True, 0.1,
                                          1e-5)[0]
        # Inference reads the statistics the op above has just written.
        y = aten._native_batch_norm_legit(y, b.weight, b.bias, b.running_mean, b.running_var, False, 0.1, 1e-5)[0]
        return y.mean((2, 3))


def batch_norm_2x(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_BatchNorm2x(), mode, torch.randn(2, 3, 4, 4), 3)
