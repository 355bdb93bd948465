"""C++ rules for targets that compile against LibTorch: cc_library/cc_test/cc_binary plus torch/torch.h
precompiled (see precompiled_header.bzl for why and how).

    load("//third_party/libtorch:torch_cc.bzl", "torch_cc_library")
    torch_cc_library(name = "x", srcs = ["x.cc"], deps = ["@libtorch"])

Each compile of such a target starts with `-include magi_torch_pch.h` (<torch/torch.h>), so its
sources may include any LibTorch header as before; in fastbuild GCC loads the precompiled header
instead of parsing ~300k lines of templates. Use these rules for every target whose sources
include a LibTorch header, directly or through a header of ours; other targets keep the plain cc_
rules (a translation unit that never touches LibTorch would pay the precompiled header's load).
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

_PCH = Label("//third_party/libtorch:torch_pch")

def _with_torch_pch(kwargs):
    kwargs["copts"] = ["-include", "magi_torch_pch.h"] + kwargs.get("copts", [])
    kwargs["deps"] = kwargs.get("deps", []) + [_PCH]
    return kwargs

def torch_cc_library(**kwargs):
    cc_library(**_with_torch_pch(kwargs))

def torch_cc_test(**kwargs):
    cc_test(**_with_torch_pch(kwargs))

def torch_cc_binary(**kwargs):
    cc_binary(**_with_torch_pch(kwargs))
