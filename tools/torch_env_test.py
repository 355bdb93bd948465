"""Tests of tools/torch_env.py that need no network and no PyTorch: lock parsing, the wheel
cache's hash check, and which CUDA libraries are linked from CUDA_HOME (on small shared
libraries built here with the C compiler, standing in for torch's and CUDA's).

    /usr/bin/python3 tools/torch_env_test.py
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_env  # noqa: E402

_HASH_A = "a" * 64


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def _shared_library(folder, soname, needs=(), search=()):
    """Builds folder/soname, a shared library whose DT_NEEDED entries are `needs` (found in `search`)."""
    os.makedirs(folder, exist_ok=True)
    source = _write(os.path.join(folder, soname + ".c"), "int f_%s(void) { return 0; }\n" % soname.replace(".", "_"))
    links = []
    for dependency in needs:
        links += ["-l:" + dependency]
    command = ["gcc", "-shared", "-fPIC", "-o", os.path.join(folder, soname), "-Wl,-soname," + soname,
               "-Wl,--no-as-needed", source] + ["-L" + d for d in search] + links
    subprocess.run(command, check=True)
    os.remove(source)


class ParseLockTest(unittest.TestCase):
    def test_reads_pinned_entries_with_continuations_and_comments(self):
        with tempfile.TemporaryDirectory() as tmp:
            lock = _write(os.path.join(tmp, "x.txt"), "# header\ntorch==2.12.1 \\\n    --hash=sha256:%s\n"
                          "    # why it is here\nnvidia-cufile==1.15.1.6 --hash=sha256:%s --hash=sha256:%s\n" %
                          (_HASH_A, "b" * 64, "c" * 64))
            requirements = torch_env.parse_lock(lock)
        self.assertEqual([(r.name, r.version) for r in requirements], [("torch", "2.12.1"), ("nvidia-cufile", "1.15.1.6")])
        self.assertEqual(requirements[0].hashes, {_HASH_A})
        self.assertEqual(requirements[1].hashes, {"b" * 64, "c" * 64})
        self.assertEqual(requirements[1].wheel_prefix(), "nvidia_cufile-1.15.1.6-")

    def test_an_entry_without_hash_names_the_file_and_entry(self):
        with tempfile.TemporaryDirectory() as tmp:
            lock = _write(os.path.join(tmp, "x.txt"), "torch==2.12.1 --hash=sha256:%s\nsympy>=1.13\n" % _HASH_A)
            with self.assertRaises(torch_env.EnvError) as error:
                torch_env.parse_lock(lock)
        self.assertIn("x.txt: entry 2 is not `name==version --hash=sha256:HEX`: 'sympy>=1.13'", str(error.exception))


class WheelCacheTest(unittest.TestCase):
    def test_a_cached_file_counts_only_with_the_pinned_hash(self):
        with tempfile.TemporaryDirectory() as tmp:
            wheel = _write(os.path.join(tmp, "typing_extensions-4.16.0-py3-none-any.whl"), "contents")
            good = hashlib.sha256(b"contents").hexdigest()
            pinned = torch_env.Requirement("typing-extensions", "4.16.0", {good}, "")
            other = torch_env.Requirement("typing-extensions", "4.16.0", {_HASH_A}, "")
            newer = torch_env.Requirement("typing-extensions", "4.17.0", {good}, "")
            self.assertEqual(torch_env._cached_wheel(pinned, tmp), wheel)
            self.assertIsNone(torch_env._cached_wheel(other, tmp))
            self.assertIsNone(torch_env._cached_wheel(newer, tmp))


class LinkCudaLibrariesTest(unittest.TestCase):
    """A fake install: torch/lib/libtorch_cpu.so needs libcudart.so.13 (CUDA_HOME/lib64) and
    libwheel.so.0 (an nvidia wheel), which needs libcupti.so.13 (CUDA_HOME/lib); the wheel also
    ships a plugin nothing links, which needs a library nobody has."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        root = self.tmp.name
        self.cuda = os.path.join(root, "cuda")
        self.site = os.path.join(root, "site-packages")
        _shared_library(os.path.join(self.cuda, "lib64"), "libcudart.so.13")
        _shared_library(os.path.join(self.cuda, "lib"), "libcupti.so.13")
        _shared_library(os.path.join(root, "elsewhere"), "libmpi.so.40")
        wheel_lib = os.path.join(self.site, "nvidia", "wheel", "lib")
        _shared_library(wheel_lib, "libwheel.so.0", ["libcupti.so.13"], [os.path.join(self.cuda, "lib")])
        _shared_library(wheel_lib, "plugin_mpi.so.3", ["libmpi.so.40"], [os.path.join(root, "elsewhere")])
        self.torch_lib = os.path.join(self.site, "torch", "lib")
        _shared_library(self.torch_lib, "libtorch_cpu.so", ["libcudart.so.13", "libwheel.so.0"],
                        [os.path.join(self.cuda, "lib64"), wheel_lib])

    def tearDown(self):
        self.tmp.cleanup()

    def test_links_what_torch_loads_from_cuda_home(self):
        linked = torch_env.link_cuda_libraries(self.site, self.cuda, "13")
        self.assertEqual(linked, ["libcudart.so.13", "libcupti.so.13"])
        target = os.path.join(self.site, "nvidia", "cu13", "lib")
        self.assertEqual(os.readlink(os.path.join(target, "libcudart.so.13")),
                         os.path.realpath(os.path.join(self.cuda, "lib64", "libcudart.so.13")))
        self.assertFalse(os.path.exists(os.path.join(target, "libmpi.so.40")))  # only the plugin needs it

    def test_names_every_library_cuda_home_lacks(self):
        os.remove(os.path.join(self.cuda, "lib", "libcupti.so.13"))
        with self.assertRaises(torch_env.EnvError) as error:
            torch_env.link_cuda_libraries(self.site, self.cuda, "13")
        self.assertIn("lacks libraries that torch needs: libcupti.so.13 (needed by nvidia/wheel/lib/libwheel.so.0)",
                      str(error.exception))


if __name__ == "__main__":
    unittest.main()
