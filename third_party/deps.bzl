"""magi_dependencies(): every external repository Magi's targets use.

Call it from the WORKSPACE of Magi or of any workspace that depends on Magi:

    local_repository(name = "magi", path = "/path/to/magi")   # or http_archive
    load("@magi//third_party:deps.bzl", "magi_dependencies")
    magi_dependencies()

All repositories come from the machine (Debian packages; tools/bazel installs them)
or from environment variables, so nothing is downloaded:
  MAGI_SYSROOT   prefix of Abseil, Protobuf, GoogleTest, Benchmark (default /usr)
  LIBTORCH_HOME  LibTorch (default Debian's /usr, else python3's torch)
  CUDA_HOME      CUDA toolkit (default /usr/local/cuda), used by --config=cuda
  NCCL_HOME      NCCL (default CUDA_HOME)
A repository that the caller defined already (same name) is left as it is.
"""

load("//third_party:absl.bzl", "absl_package_builds", "absl_required_libs")
load("//third_party:bazel_standins.bzl", "remote_coverage_tools_standin", "rules_cc_standin", "rules_java_standin")
load("//third_party:system_library.bzl", "system_library")
load("//third_party/cuda:cuda_configure.bzl", "cuda_configure", "nccl_configure")
load("//third_party/libtorch:libtorch_configure.bzl", "libtorch_configure")

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def magi_dependencies():
    """Defines Magi's external repositories (offline; see the module docstring)."""
    _maybe(rules_cc_standin, "rules_cc")
    _maybe(rules_java_standin, "rules_java")
    _maybe(remote_coverage_tools_standin, "remote_coverage_tools")

    _maybe(
        system_library,
        "com_google_absl",
        build_file = Label("//third_party:absl.BUILD"),
        packages = absl_package_builds(),
        include_dirs = ["absl"],
        required_libs = absl_required_libs(),
        debian_packages = ["libabsl-dev"],
    )
    _maybe(
        system_library,
        "com_google_protobuf",
        build_file = Label("//third_party:protobuf.BUILD"),
        include_dirs = ["google/protobuf"],
        required_libs = ["protobuf"],
        files = {"protoc.sh": "#!/bin/sh\nexec %{PREFIX}/bin/protoc \"$@\"\n"},
        debian_packages = ["libprotobuf-dev", "protobuf-compiler"],
    )
    _maybe(
        system_library,
        "com_google_googletest",
        build_file = Label("//third_party:googletest.BUILD"),
        include_dirs = ["gtest", "gmock"],
        required_libs = ["gtest", "gmock", "gmock_main"],
        debian_packages = ["libgtest-dev", "libgmock-dev"],
    )
    _maybe(
        system_library,
        "com_github_google_benchmark",
        build_file = Label("//third_party:benchmark.BUILD"),
        include_dirs = ["benchmark"],
        required_libs = ["benchmark", "benchmark_main"],
        debian_packages = ["libbenchmark-dev"],
    )
    _maybe(
        system_library,
        "gloo",
        build_file = Label("//third_party:gloo.BUILD"),
        include_dirs = ["gloo"],
        required_libs = ["gloo"],
        debian_packages = ["libgloo-dev"],
    )
    _maybe(libtorch_configure, "libtorch")
    _maybe(cuda_configure, "local_cuda")
    _maybe(nccl_configure, "local_nccl")
