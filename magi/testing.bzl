"""magi_cc_test: a GoogleTest test, every C++ test of the workspace; magi_py_test: a Python test file.

    load("//magi:testing.bzl", "magi_cc_test")
    magi_cc_test(name = "dce_test", deps = [":dce", "//magi/ir:text"])

adds what every such test needs (GoogleTest's main, Magi's gtest printers for absl::Status and
StatusOr), makes srcs [name + ".cc"] and size "small" unless given, and with torch = True builds
through torch_cc_test (LibTorch's precompiled header; third_party/libtorch/torch_cc.bzl), with
pch = "aten" for a test that uses ATen but not LibTorch's C++ frontend. Tests of a size other than
small say so; the rest is cc_test's.

    magi_cc_test(name = "launcher_test", own_main = True, deps = [":launcher"])

own_main = True is for a test whose main() is its own (or a library's it links, such as the fuzz
targets' mutation driver): a multi-process test that re-launches its binary as the workers, and
decides in main() whether this process is a worker or runs the tests. GoogleTest itself
(@com_google_googletest//:gtest) and the printers are added, gtest_main is not: it would bring a
second main(), and which of the two runs would be down to the link.

    load("//magi:testing.bzl", "magi_py_test")
    magi_py_test(name = "kernel_breakdown_test", data = ["kernel_breakdown.py"])

runs [name + ".py"] (or `src`) with `python` (Debian's /usr/bin/python3 unless given, e.g.
LIBTORCH_PYTHON for the LibTorch's own) through the one runner tools/python_test.sh, from the
workspace's runfiles root, with TMPDIR in the test's temporary folder and `env` (a dict) in its
environment; `args` follow the script.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")
load("//third_party/libtorch:torch_cc.bzl", "torch_cc_test")

_GTEST_PRINTERS = Label("//magi/base:gtest_printers")
_GTEST = Label("@com_google_googletest//:gtest")
_GTEST_MAIN = Label("@com_google_googletest//:gtest_main")

def magi_cc_test(name, srcs = None, deps = [], size = "small", torch = False, own_main = False, pch = None, **kwargs):
    if pch != None and not torch:
        fail("%s: pch = %r needs torch = True" % (name, pch))
    test = cc_test
    if torch:
        test = torch_cc_test
        kwargs["pch"] = pch if pch != None else "torch"
    test(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        size = size,
        deps = deps + [_GTEST_PRINTERS, _GTEST if own_main else _GTEST_MAIN],
        **kwargs
    )

def magi_py_test(name, src = None, python = "/usr/bin/python3", args = [], data = [], size = "small", env = {}, **kwargs):
    src = src if src != None else name + ".py"
    native.sh_test(
        name = name,
        srcs = [Label("//tools:python_test.sh")],
        # `env` travels as runner arguments: sh_test has no `env` attribute in the Bazel 2.1 the
        # GPU machine builds with.
        args = ["--env=%s=%s" % (key, env[key]) for key in sorted(env)] + [python, "$(location %s)" % src] + args,
        data = [src] + data,
        size = size,
        **kwargs
    )
