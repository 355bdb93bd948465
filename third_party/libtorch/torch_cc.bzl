"""C++ rules for targets that compile against LibTorch: cc_library/cc_test/cc_binary plus a LibTorch
header precompiled (see precompiled_header.bzl for why and how).

    load("//third_party/libtorch:torch_cc.bzl", "torch_cc_library")
    torch_cc_library(name = "x", srcs = ["x.cc"], deps = ["@libtorch"])
    torch_cc_library(name = "y", srcs = ["y.cc"], pch = "aten", deps = ["@libtorch"])

Each compile of such a target starts with `-include` of one precompiled header, so its sources may
include any LibTorch header as before; in fastbuild GCC loads the precompiled header instead of
parsing it. `pch` picks which:

- "torch" (the default): <torch/torch.h>, LibTorch's C++ frontend (torch::nn modules, optimizers,
  serialization, data loaders) on top of ATen. For sources that use the frontend, directly or through
  a header of ours (magi/models, magi/frontend/capture, magi/frontend/fsdp, ...).
- "aten": <ATen/ATen.h>, tensors and ATen's operators only. Loading it costs a translation unit
  1.6 s of CPU instead of 4.5 s (an empty unit, LibTorch 2.12.1 and 1.13 alike): GCC instantiates
  the templates that a header's inline functions use in every unit that loads it (a .gch cannot
  hold them), and torch/torch.h has three times as many. For sources that use at::Tensor, ATen ops,
  c10, the dispatcher or c10d stores, and no torch::nn or torch::optim. A unit that includes
  <torch/torch.h> anyway still compiles, parsing it as text (~14 s): use "torch" there.

Use these rules for every target whose sources include a LibTorch header, directly or through a
header of ours; other targets keep the plain cc_ rules (a translation unit that never touches
LibTorch would pay the precompiled header's load).
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

# pch value: the precompiled header target and the file that compiles force-include.
_PCHS = {
    "aten": (Label("//third_party/libtorch:aten_pch"), "magi_aten_pch.h"),
    "torch": (Label("//third_party/libtorch:torch_pch"), "magi_torch_pch.h"),
}

def _with_torch_pch(kwargs, pch):
    if pch not in _PCHS:
        fail("pch = %r: expected one of %s" % (pch, sorted(_PCHS.keys())))
    target, header = _PCHS[pch]
    kwargs["copts"] = ["-include", header] + kwargs.get("copts", [])
    kwargs["deps"] = kwargs.get("deps", []) + [target]
    return kwargs

def torch_cc_library(pch = "torch", **kwargs):
    cc_library(**_with_torch_pch(kwargs, pch))

def torch_cc_test(pch = "torch", **kwargs):
    cc_test(**_with_torch_pch(kwargs, pch))

def torch_cc_binary(pch = "torch", **kwargs):
    cc_binary(**_with_torch_pch(kwargs, pch))
