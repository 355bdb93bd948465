"""magi_cc_test: the GoogleTest test of a magi/ package.

    load("//magi:testing.bzl", "magi_cc_test")
    magi_cc_test(name = "dce_test", deps = [":dce", "//magi/ir:text"])

adds what every such test needs (GoogleTest's main, Magi's gtest printers for absl::Status and
StatusOr), makes srcs [name + ".cc"] and size "small" unless given, and with torch = True builds
through torch_cc_test (LibTorch's precompiled header; third_party/libtorch/torch_cc.bzl). Tests
with their own main() or a size other than small say so; the rest is cc_test's.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")
load("//third_party/libtorch:torch_cc.bzl", "torch_cc_test")

_TEST_DEPS = [
    Label("//magi/base:gtest_printers"),
    Label("@com_google_googletest//:gtest_main"),
]

def magi_cc_test(name, srcs = None, deps = [], size = "small", torch = False, **kwargs):
    test = torch_cc_test if torch else cc_test
    test(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        size = size,
        deps = deps + _TEST_DEPS,
        **kwargs
    )
