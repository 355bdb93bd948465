#!/usr/bin/env python3
"""Which ATen ops LibTorch's CPU kernels run on complex32 (torch.chalf).

    /usr/bin/python3 tools/chalf_kernel_probe.py          # Debian's PyTorch 1.13
    PYTHON_OF_2X tools/chalf_kernel_probe.py              # e.g. MAGI_TORCH=2.12's environment

Runs each op once, eagerly, on small chalf tensors and prints "ok" or LibTorch's error. Magi's
IR carries c32 (magi/ir/types.h); whether a chalf graph runs is decided by these kernels, as it is
in eager PyTorch (docs/fx.md, "Importer").
"""

import warnings

import torch

warnings.filterwarnings("ignore")


def _chalf_backward():
    w = torch.randn(3, 4, requires_grad=True)
    loss = torch.view_as_real(w.chalf() * w.chalf()).float().sum()
    return torch.autograd.grad(loss, [w])


def main():
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    c = x.chalf()
    cases = [
        ("_to_copy f32 -> c32 (Tensor.chalf)", lambda: x.chalf()),
        ("_to_copy c32 -> c64", lambda: c.to(torch.complex64)),
        ("_to_copy c32 -> c128", lambda: c.to(torch.complex128)),
        ("clone", lambda: c.clone()),
        ("clone of a transpose (contiguous)", lambda: c.t().contiguous()),
        ("copy_ from f32", lambda: c.clone().copy_(x)),
        ("view_as_real", lambda: torch.view_as_real(c)),
        ("view_as_complex (of f16)", lambda: torch.view_as_complex(x.half().reshape(6, 2))),
        ("complex (f16, f16)", lambda: torch.complex(x.half(), x.half())),
        ("real / imag", lambda: (c.real, c.imag)),
        ("add", lambda: c + c),
        ("sub", lambda: c - c),
        ("mul", lambda: c * c),
        ("neg", lambda: -c),
        ("abs", lambda: c.abs()),
        ("conj_physical", lambda: torch.conj_physical(c)),
        ("eq", lambda: c == c),
        ("where", lambda: torch.where(x > 0, c, c)),
        ("masked_fill", lambda: c.masked_fill(x > 0, 0)),
        ("cat", lambda: torch.cat([c, c])),
        ("stack", lambda: torch.stack([c, c])),
        ("repeat", lambda: c.repeat(2, 1)),
        ("flip", lambda: c.flip(0)),
        ("index_select", lambda: c.index_select(0, torch.tensor([0, 2]))),
        ("index_put_", lambda: c.clone().index_put_((torch.tensor([0]),), c[0:1])),
        ("fill_", lambda: c.clone().fill_(1 + 2j)),
        ("zero_", lambda: c.clone().zero_()),
        ("zeros / ones / full", lambda: (torch.zeros(2, dtype=torch.chalf), torch.ones(2, dtype=torch.chalf),
                                         torch.full((2,), 1 + 1j, dtype=torch.chalf))),
        ("select_scatter", lambda: torch.select_scatter(c, c[0], 0, 0)),
        ("slice_scatter", lambda: torch.slice_scatter(c, c[:1], 0, 0, 1, 1)),
        ("diagonal_scatter", lambda: torch.diagonal_scatter(c[:, :3], c.diagonal()[:3])),
        ("as_strided_scatter", lambda: torch.as_strided_scatter(c, c[0], (4,), (1,), 0)),
        ("div", lambda: c / c),
        ("sum", lambda: c.sum()),
        ("sum.dim_IntList", lambda: c.sum(0)),
        ("mean", lambda: c.mean()),
        ("mm", lambda: c @ c.t()),
        ("exp", lambda: c.exp()),
        ("sqrt", lambda: c.sqrt()),
        ("angle", lambda: c.angle()),
        ("equal", lambda: torch.equal(c, c)),
        ("fft_fft", lambda: torch.fft.fft(c)),
        ("backward of chalf() and mul", _chalf_backward),
    ]
    print("torch %s, complex32 on CPU" % torch.__version__)
    ok = 0
    for name, run in cases:
        try:
            run()
            print("  ok    %s" % name)
            ok += 1
        except Exception as error:  # noqa: BLE001 - the probe reports LibTorch's own message
            print("  FAIL  %s: %s" % (name, str(error).split("\n")[0][:100]))
    print("%d of %d ops run" % (ok, len(cases)))


if __name__ == "__main__":
    main()
