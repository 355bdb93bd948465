"""magi_cuda_library: a cc_library of one CUDA source compiled by nvcc.

    load("//third_party/cuda:cuda.bzl", "magi_cuda_library")
    magi_cuda_library(name = "fused_adamw", src = "fused_adamw.cu", hdrs = ["fused_adamw.h"],
                      cu_hdrs = ["split_float.h"])

Bazel has no CUDA rules offline, so a genrule of our own runs @local_cuda//:nvcc (the toolkit
cuda_configure.bzl found; $$CC, which --action_env=CC sets on the GPU machine whose first g++
on PATH is broken, is the host compiler) for Hopper: sm_90 code plus its PTX for later chips.
The object links into a cc_library with `hdrs` and cudart. Both are tagged "cuda": built only
with --config=cuda (`tags` adds to that). `cu_hdrs` are further headers the source includes.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

def magi_cuda_library(name, src, hdrs, cu_hdrs = [], deps = [], tags = [], **kwargs):
    native.genrule(
        name = name + "_cu",
        srcs = [src] + hdrs + cu_hdrs,
        outs = [name + ".pic.o"],
        cmd = "$(location @local_cuda//:nvcc) $${CC:+-ccbin $$CC} -c -O3 -std=c++17 -Xcompiler -fPIC " +
              "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 " +
              "-I. -o $@ $(location %s)" % src,
        tags = ["cuda"] + tags,
        tools = ["@local_cuda//:nvcc"],
    )
    cc_library(
        name = name,
        srcs = [":" + name + "_cu"],
        hdrs = hdrs,
        tags = ["cuda"] + tags,
        deps = deps + ["@local_cuda//:cudart"],
        **kwargs
    )
