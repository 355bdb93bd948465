"""Configure-style repository rule for LibTorch.

Finds LibTorch from LIBTORCH_HOME (tools/bazel sets it for MAGI_TORCH=2.12 / 2.11, see
docs/torch2.md), else Debian's /usr install (libtorch-dev), else the torch package of
`python3` (pip wheels, as on the GPU machine). Reads the version from torch/version.h and
_GLIBCXX_USE_CXX11_ABI from TorchConfig.cmake (PyTorch >= 2.9 no longer writes it there:
then from libc10.so's symbols), and fails with a clear message when LibTorch is missing or
the ABI does not match the rest of the build (all other dependencies use the C++11 ABI).

The generated repository @libtorch has:
  :libtorch       the C++ API (torch/torch.h), ATen, c10; CPU libraries only (libtorch_cpu,
                  libc10), so CPU binaries never load libtorch_cuda and CUDA's libraries
  :libtorch_cuda  adds libtorch, libtorch_cuda and libc10_cuda (only where the install has them)
  :pybind11       pybind11 (shipped in the wheel's include/pybind11) and Python.h of :python3,
                  for the `magi` Python extension (magi/frontend/python); unavailable where either
                  is missing (Debian's 1.13 has no pybind11 headers)
  :python3        the Python interpreter whose torch package is this LibTorch (MAGI_TORCH_PYTHON,
                  a venv's bin/python3 next to it, Debian's /usr/bin/python3 for /usr, or python3
                  on PATH, whichever imports torch of the same version), as an executable for
                  genrules (tools/fx_export.py, AOTInductor); where there is none, running it fails
                  with the reason
  :config.bzl     LIBTORCH_VERSION(_MAJOR/_MINOR), LIBTORCH_CXX11_ABI, LIBTORCH_HAS_CUDA,
                  LIBTORCH_PYTHON for BUILD files, and if_libtorch_at_least(major, minor, then, otherwise)
"""

load("//third_party:repo_utils.bzl", "read_define")
load("//third_party:unavailable.bzl", "unavailable_target")

_CUDA_TARGET = """
cc_library(
    name = "libtorch_cuda",
    deps = [":libtorch"],
    linkopts = {cuda_libs},
)
"""

_HEADER_DIRS = ["ATen", "c10", "caffe2", "torch"]

def _python_torch_dir(ctx):
    python = ctx.which("python3")
    if not python:
        return None
    result = ctx.execute([python, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"], timeout = 120)
    if result.return_code != 0:
        return None
    return result.stdout.strip()

def _numeric_version(text):
    """"2.12.1" for "2.12.1+cu130", "1.13.0" for "1.13.0a0+git": the leading numbers."""
    out = []
    for part in text.split("."):
        digits = ""
        for c in part.elems():
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        out.append(digits)
        if len(digits) != len(part):
            break
    return ".".join(out)

def _find_python(ctx, home, version):
    """The Python whose `import torch` is LibTorch `version` (at `home` when it is a pip
    install), or (None, reasons) listing what was tried."""
    candidates = []
    explicit = ctx.os.environ.get("MAGI_TORCH_PYTHON", "")
    if explicit:
        candidates.append(explicit)
    parts = home.rstrip("/").split("/")
    if len(parts) > 4 and parts[-2] in ("site-packages", "dist-packages") and parts[-4] == "lib":
        candidates.append("/".join(parts[:-4]) + "/bin/python3")  # a venv: VENV/lib/pythonX.Y/site-packages/torch
    if home == "/usr":
        candidates.append("/usr/bin/python3")
    on_path = ctx.which("python3")
    if on_path:
        candidates.append(str(on_path))
    tried = []
    for candidate in candidates:
        if not ctx.path(candidate).exists:
            tried.append("%s (missing)" % candidate)
            continue
        result = ctx.execute([candidate, "-c", "import torch; print(torch.__version__)"], timeout = 120)
        found = result.stdout.strip()
        if result.return_code != 0:
            tried.append("%s (cannot import torch)" % candidate)
        elif _numeric_version(found) != version:
            tried.append("%s (torch %s)" % (candidate, found))
        else:
            return candidate, tried
    return None, tried

def _cxx11_abi_from_library(ctx, library):
    """1 if `library`'s symbols use libstdc++'s C++11 ABI (std::__cxx11), else 0."""
    result = ctx.execute(["grep", "-c", "__cxx11", library])
    return 1 if result.return_code == 0 else 0

def _find_home(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "")
    if home:
        return home, "LIBTORCH_HOME"
    if ctx.path("/usr/include/torch/csrc/api/include/torch/torch.h").exists:
        return "/usr", "Debian's libtorch-dev"
    home = _python_torch_dir(ctx)
    if home:
        return home, "python3's torch package"
    return None, None

def _libtorch_configure_impl(ctx):
    home, source = _find_home(ctx)
    if not home:
        fail("\nLibTorch not found. Install Debian's libtorch-dev (tools/bazel does this with apt), " +
             "or set LIBTORCH_HOME to a LibTorch folder (one with include/torch/csrc/api/include).")
    include = home + "/include"
    version_h = ctx.path(include + "/torch/csrc/api/include/torch/version.h")
    if not version_h.exists:
        fail("\nLibTorch at %s (from %s) has no %s: not a LibTorch install." % (home, source, version_h))
    content = ctx.read(version_h)

    # Since 2.9 the numbers live in torch/headeronly/version.h, which version.h includes.
    headeronly = ctx.path(include + "/torch/headeronly/version.h")
    if read_define(content, "TORCH_VERSION_MAJOR") == None and headeronly.exists:
        content = ctx.read(headeronly)
    major = read_define(content, "TORCH_VERSION_MAJOR")
    minor = read_define(content, "TORCH_VERSION_MINOR")
    patch = read_define(content, "TORCH_VERSION_PATCH")
    if major == None or minor == None:
        fail("\nCould not read TORCH_VERSION_MAJOR/MINOR from %s." % version_h)
    version = "%s.%s.%s" % (major, minor, patch or "0")
    if (int(major), int(minor)) < (1, 13):
        fail("\nLibTorch %s at %s is too old: Magi needs 1.13 or newer." % (version, home))

    libdir = None
    for sub in ["lib", "lib/x86_64-linux-gnu", "lib64"]:
        if ctx.path(home + "/" + sub + "/libtorch_cpu.so").exists:
            libdir = home + "/" + sub
            break
    if not libdir:
        fail("\nLibTorch at %s has no libtorch_cpu.so under lib/ or lib/x86_64-linux-gnu/." % home)

    abi = None
    for cmake in [home + "/share/cmake/Torch/TorchConfig.cmake", libdir + "/cmake/Torch/TorchConfig.cmake"]:
        if ctx.path(cmake).exists:
            text = ctx.read(cmake)
            if "_GLIBCXX_USE_CXX11_ABI=0" in text:
                abi = 0
            elif "_GLIBCXX_USE_CXX11_ABI=1" in text:
                abi = 1
            break
    if abi == None:
        abi = _cxx11_abi_from_library(ctx, libdir + "/libc10.so")
    if abi != 1:
        fail(("\nLibTorch %s at %s was built with _GLIBCXX_USE_CXX11_ABI=0, but Abseil, Protobuf and GoogleTest " +
              "here use the C++11 ABI. Use a cxx11-ABI LibTorch (PyTorch >= 2.7 wheels, Debian's libtorch-dev).") % (version, home))

    has_cuda = ctx.path(libdir + "/libtorch_cuda.so").exists
    for d in _HEADER_DIRS:
        if ctx.path(include + "/" + d).exists:
            ctx.symlink(include + "/" + d, "include/" + d)

    # Debian's CPU-only package ships c10/cuda's headers without the one CMake generates, so
    # nothing that includes them compiles. Supply it (it only says c10_cuda is a shared library)
    # so CUDA sources can at least be compiled against this install.
    generated = []
    if ctx.path(include + "/c10/cuda/CUDAMacros.h").exists and not ctx.path(include + "/c10/cuda/impl/cuda_cmake_macros.h").exists:
        ctx.file("generated/c10/cuda/impl/cuda_cmake_macros.h", "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        generated = ["generated"]

    linkopts = []
    if home != "/usr":
        linkopts = ["-L" + libdir, "-Wl,-rpath," + libdir]

    # libtorch_cpu/libtorch_cuda register their kernels from static initializers, so they
    # must be linked even when no symbol of theirs is referenced directly. libtorch.so is a
    # stub that only links both (1.13 and 2.x): CPU binaries leave it out, so that they do
    # not load libtorch_cuda.so and with it CUDA's libraries (PyPI's wheels are CUDA builds).
    # --push-state/--pop-state restore the linker's mode afterwards: a trailing --as-needed
    # would turn it on for every library after these (Debian's default is off) and drop, e.g.,
    # Abseil's str_format from binaries whose own objects do not call it although a shared
    # library they load does (undefined symbol at run time).
    cpu_libs = ["-Wl,--push-state,--no-as-needed", "-ltorch_cpu", "-lc10", "-Wl,--pop-state"]
    cuda_libs = ["-Wl,--push-state,--no-as-needed", "-ltorch", "-ltorch_cuda", "-lc10_cuda", "-Wl,--pop-state"]

    python, tried = _find_python(ctx, home, version)
    if python:
        # One OpenMP thread unless the caller says otherwise, as tests run (.bazelrc's
        # --test_env): CPU kernels split their reductions by thread count, so references a
        # genrule records with this Python are bitwise what the tests compute only at the
        # same count (resnet18's convolution gradients differ by 2e-4 between 1 and 2).
        ctx.file("python3", ("#!/bin/sh\n# The Python whose torch is LibTorch %s at %s.\n" +
                             "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} exec %s \"$@\"\n") % (version, home, python))
    else:
        ctx.file("python3", "#!/bin/sh\necho 'ERROR: @libtorch//:python3: no Python imports torch %s (LibTorch at %s); tried: %s. " % (
            version, home, "; ".join(tried) or "nothing") + "Set MAGI_TORCH_PYTHON, or use MAGI_TORCH=2.12 (docs/torch2.md).' >&2\nexit 1\n")

    # pybind11 and the Python headers for Python extensions, outside include/ so that the
    # :headers target (and every compile that uses it) stays as it was.
    pybind11_reason = ""
    python_include = ""
    if python:
        result = ctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], timeout = 60)
        python_include = result.stdout.strip() if result.return_code == 0 else ""
    if not ctx.path(include + "/pybind11/pybind11.h").exists:
        pybind11_reason = "LibTorch %s at %s ships no pybind11 headers (include/pybind11)" % (version, home)
    elif not python_include or not ctx.path(python_include + "/Python.h").exists:
        pybind11_reason = "no Python.h for the Python of LibTorch %s (%s): install python3-dev" % (version, python or "none found")
    else:
        ctx.symlink(include + "/pybind11", "pybind11_include/pybind11")
        ctx.symlink(python_include, "python_include")
    pybind11_target = unavailable_target("pybind11", pybind11_reason) if pybind11_reason else """
cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h", "python_include/**/*.h"]),
    includes = ["pybind11_include", "python_include"],
)
"""

    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("config.bzl", "\n".join([
        "# Generated by libtorch_configure.bzl from " + home + " (" + source + ").",
        "LIBTORCH_HOME = %r" % home,
        "LIBTORCH_VERSION = %r" % version,
        "LIBTORCH_VERSION_MAJOR = %s" % major,
        "LIBTORCH_VERSION_MINOR = %s" % minor,
        "LIBTORCH_CXX11_ABI = %d" % abi,
        "LIBTORCH_HAS_CUDA = %s" % has_cuda,
        "LIBTORCH_PYTHON = %r" % (python or ""),
        "",
        "def if_libtorch_at_least(major, minor, then, otherwise = []):",
        "    \"\"\"`then` when this LibTorch is major.minor or newer, else `otherwise`.\"\"\"",
        "    return then if LIBTORCH_VERSION_MAJOR * 1000 + LIBTORCH_VERSION_MINOR >= major * 1000 + minor else otherwise",
        "",
    ]))
    ctx.file("BUILD", """\
# Generated by Magi's libtorch_configure.bzl: LibTorch {version} from {home} ({source}).
package(default_visibility = ["//visibility:public"])

exports_files(["config.bzl", "python3"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "generated/**/*.h"]),
    includes = ["include", "include/torch/csrc/api/include"] + {generated},
)

cc_library(
    name = "libtorch",
    deps = [":headers"],
    linkopts = {linkopts} + {cpu_libs} + ["-lpthread", "-ldl"],
)

""".format(version = version, home = home, source = source, linkopts = repr(linkopts),
           cpu_libs = repr(cpu_libs), generated = repr(generated)) + pybind11_target + (_CUDA_TARGET.format(cuda_libs = repr(cuda_libs)) if has_cuda else
          unavailable_target("libtorch_cuda", "LibTorch %s at %s has no CUDA libraries (libtorch_cuda.so); " % (version, home) +
                             "--config=cuda needs a CUDA build of LibTorch: set LIBTORCH_HOME to one.")))

libtorch_configure = repository_rule(
    implementation = _libtorch_configure_impl,
    environ = ["LIBTORCH_HOME", "MAGI_TORCH_PYTHON", "PATH"],
    local = True,
)
