#!/usr/bin/env python3
"""Pinned PyTorch 2.x environments from PyPI for building and testing Magi (tools/bazel calls this).

    /usr/bin/python3 tools/torch_env.py 2.12           # makes the environment if missing; prints LIBTORCH_HOME
    /usr/bin/python3 tools/torch_env.py 2.12 --shell   # `export ...` lines for eval (what tools/bazel uses)
    /usr/bin/python3 tools/torch_env.py 2.12 --info    # what making it cost on this machine
    MAGI_TORCH=2.12 tools/bazel test //...             # the usual way: tools/bazel runs this script

SERIES names a lock file, tools/torch_env/SERIES.txt (2.12: torch 2.12.1, 2.11: torch 2.11.0): the exact
version and sha256 of torch, torchvision, their pure-Python dependencies and expecttest, installed with
`pip install --no-deps --require-hashes` into a venv of Debian's /usr/bin/python3 (CPython 3.11).
A lock without torch (1.13) makes a venv that also sees Debian's packages (python3-torch 1.13 and
torchvision) and adds only what Debian lacks (expecttest); its LibTorch stays Debian's libtorch-dev.

PyPI's Linux torch wheels are CUDA 13.0 builds, and their libraries need CUDA's shared libraries even for
CPU work (libtorch_cpu.so links libcudart and libcupti; `import torch` loads libtorch_cuda.so and with it
cuBLAS, cuDNN, NCCL...). By default those come from CUDA_HOME (/usr/local/cuda): every library torch needs
that neither torch nor the lock's wheels ship is symlinked from CUDA_HOME into the venv's
site-packages/nvidia/cuNN/lib, a folder on torch's own RUNPATH, so neither Python nor C++ binaries need
LD_LIBRARY_PATH. The lock adds wheels only for what CUDA_HOME lacks (cuSPARSELt, NVSHMEM, cuFile, and for
2.12 a newer NCCL). With --cuda-wheels (or MAGI_TORCH_CUDA_WHEELS=1, or when CUDA_HOME does not exist)
SERIES-cuda-wheels.txt adds every nvidia-* wheel torch declares, and triton, instead.

Where things go (MAGI_CACHE_DIR, default ~/.cache/magi, shared by every checkout on the machine):
  wheels/                     the wheel cache: a machine downloads each pinned file once
  torch-envs/<name>/          one environment per lock content, base Python and CUDA_HOME; never
                              changed once made. magi-env.json inside marks it complete and records
                              what making it cost (--info prints it).
Environments and downloads are made under a lock file, so concurrent builds wait for each other, and an
environment without magi-env.json (an interrupted run) is removed and made again. Exit status 1: the
environment could not be made (the message says why); 2: bad usage.
"""

import argparse
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Bump when the layout of an environment changes, so that existing ones are not reused.
_FORMAT = "1"
_HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK_DIR = os.path.join(_HERE, "torch_env")
# Shared libraries found in these folders are the operating system's, not CUDA's.
_SYSTEM_LIB_DIRS = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
# The CUDA driver: present only where a GPU is; torch loads the library that needs it lazily.
_DRIVER_LIBS = {"libcuda.so.1"}


class EnvError(Exception):
    pass


def _log(message):
    print("torch_env: " + message, file=sys.stderr, flush=True)


def _canonical(name):
    return re.sub(r"[-_.]+", "_", name).lower()


class Requirement:
    def __init__(self, name, version, hashes, text):
        self.name, self.version, self.hashes, self.text = name, version, hashes, text

    def wheel_prefix(self):
        return "%s-%s-" % (_canonical(self.name), self.version)


def parse_lock(path):
    """The requirements of a lock file: `name==version --hash=sha256:...` entries, comments ignored."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise EnvError("cannot read lock file %s: %s" % (path, e.strerror))
    requirements = []
    logical = re.sub(r"\\\n", " ", text)
    for number, line in enumerate(logical.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s]+)((?:\s+--hash=sha256:[0-9a-f]{64})+)$", line)
        if not match:
            raise EnvError("%s: entry %d is not `name==version --hash=sha256:HEX`: %r" % (path, number, line))
        hashes = set(re.findall(r"sha256:([0-9a-f]{64})", match.group(3)))
        requirements.append(Requirement(match.group(1), match.group(2), hashes, line))
    return requirements


def _sha256(path, cache={}):
    key = (path, os.path.getsize(path), os.path.getmtime(path))
    if key not in cache:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        cache[key] = digest.hexdigest()
    return cache[key]


def _cached_wheel(requirement, wheels):
    for path in glob.glob(os.path.join(wheels, "*.whl")):
        if os.path.basename(path).lower().startswith(requirement.wheel_prefix()) and _sha256(path) in requirement.hashes:
            return path
    return None


def _run(command, what, env=None):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if result.returncode != 0:
        raise EnvError("%s failed (exit %d): %s\n%s" % (what, result.returncode, " ".join(command), result.stdout[-4000:]))
    return result.stdout


def download_missing(requirements, wheels):
    """Downloads the pinned wheels not yet in the cache; returns (bytes, seconds) spent."""
    missing = [r for r in requirements if _cached_wheel(r, wheels) is None]
    if not missing:
        return 0, 0.0
    _log("downloading %d wheel(s) from PyPI into %s: %s" % (len(missing), wheels, " ".join(
        "%s==%s" % (r.name, r.version) for r in missing)))
    start = time.time()
    partial = tempfile.mkdtemp(prefix=".partial-", dir=wheels)
    try:
        spec = os.path.join(partial, "requirements.txt")
        with open(spec, "w") as f:
            f.write("\n".join(r.text for r in missing) + "\n")
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
              "--no-cache-dir", "--disable-pip-version-check", "-q", "-d", partial, "-r", spec], "pip download")
        size = 0
        for path in glob.glob(os.path.join(partial, "*.whl")):
            size += os.path.getsize(path)
            os.replace(path, os.path.join(wheels, os.path.basename(path)))  # complete files only
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    seconds = time.time() - start
    still = [r.name for r in missing if _cached_wheel(r, wheels) is None]
    if still:
        raise EnvError("pip download did not produce the pinned wheels of: %s" % ", ".join(still))
    _log("downloaded %.0f MB in %.0f s" % (size / 1e6, seconds))
    return size, seconds


def _needed(library):
    """The DT_NEEDED sonames of a shared library (readelf, from binutils)."""
    out = _run(["readelf", "-d", library], "readelf")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def link_cuda_libraries(site, cuda_home, cuda_major):
    """Symlinks into site/nvidia/cu<major>/lib every library that torch's shared objects load (directly
    or through the nvidia wheels' libraries they load) and that neither those wheels nor the operating
    system provide, from CUDA_HOME. Plugins that nothing links (NVSHMEM's MPI and UCX transports) are
    left alone. Returns the sonames linked; fails naming every library that CUDA_HOME lacks too."""
    wheel_libs = {os.path.basename(p): p for p in glob.glob(os.path.join(site, "nvidia", "*", "lib", "*.so*"))}
    torch_libs = glob.glob(os.path.join(site, "torch", "lib", "*.so*")) + glob.glob(os.path.join(site, "torch", "_C*.so"))
    provided = set(os.path.basename(p) for p in torch_libs) | set(wheel_libs)
    needed = {}  # soname -> the first library that needs it
    queue = sorted(torch_libs)
    seen = set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        for soname in _needed(path):
            needed.setdefault(soname, os.path.relpath(path, site))
            if soname in wheel_libs:
                queue.append(wheel_libs[soname])
    cuda_dirs = [os.path.join(cuda_home, d) for d in ("lib64", "lib", "extras/CUPTI/lib64")]
    target = os.path.join(site, "nvidia", "cu%s" % cuda_major, "lib")
    linked, missing = [], []
    for soname, user in sorted(needed.items()):
        if soname in provided or soname in _DRIVER_LIBS:
            continue
        if any(os.path.exists(os.path.join(d, soname)) for d in _SYSTEM_LIB_DIRS):
            continue
        source = next((os.path.join(d, soname) for d in cuda_dirs if os.path.exists(os.path.join(d, soname))), None)
        if source is None:
            missing.append("%s (needed by %s)" % (soname, user))
            continue
        os.makedirs(target, exist_ok=True)
        os.symlink(os.path.realpath(source), os.path.join(target, soname))
        linked.append(soname)
    if missing:
        raise EnvError("CUDA_HOME=%s lacks libraries that torch needs: %s. Point CUDA_HOME at a CUDA %s toolkit "
                       "(with cuDNN and NCCL), or use --cuda-wheels (MAGI_TORCH_CUDA_WHEELS=1) to install every "
                       "nvidia-* wheel instead." % (cuda_home, ", ".join(missing), cuda_major))
    return linked


def _torch_cuda_version(home):
    """CUDA version torch was built for ("13.0"; "" for CPU builds), from torch/version.py, read as
    text because importing torch before its CUDA libraries are in place would fail."""
    try:
        with open(os.path.join(home, "version.py")) as f:
            match = re.search(r"^cuda\b[^=]*=\s*['\"]?([0-9.]*)", f.read(), re.M)
    except OSError as e:
        raise EnvError("cannot read torch's version.py in %s: %s" % (home, e.strerror))
    return match.group(1) if match else ""


def _disk_bytes(path):
    return int(_run(["du", "-sb", path], "du").split()[0])


def _write_json_atomically(path, value):
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Plan:
    """What environment a series needs on this machine, and where it lives."""

    def __init__(self, series, cuda_wheels, cache):
        self.series = series
        self.lock = os.path.join(_LOCK_DIR, series + ".txt")
        if not re.match(r"^\d+\.\d+$", series) or not os.path.exists(self.lock):
            known = sorted(f[:-4] for f in os.listdir(_LOCK_DIR) if re.match(r"^\d+\.\d+\.txt$", f))
            raise EnvError("no lock file for PyTorch %r (tools/torch_env/%s.txt); known series: %s" %
                           (series, series, ", ".join(known)))
        self.locks = [self.lock]
        self.cuda_home = os.path.realpath(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
        if not cuda_wheels and not os.path.isdir(self.cuda_home):
            _log("CUDA_HOME %s does not exist: installing torch's nvidia-* wheels instead" % self.cuda_home)
            cuda_wheels = True
        self.cuda_wheels = cuda_wheels
        if cuda_wheels:
            self.locks.append(os.path.join(_LOCK_DIR, series + "-cuda-wheels.txt"))
        self.requirements = [r for lock in self.locks for r in parse_lock(lock)]
        torch = [r for r in self.requirements if r.name == "torch"]
        if len(torch) > 1:
            raise EnvError("%s pins torch more than once" % self.lock)
        # No torch in the lock: the base Python's own (Debian's python3-torch) is used.
        self.system_torch = not torch
        if self.system_torch:
            self.cuda_wheels = cuda_wheels = False
            self.version = _run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                "importing Debian's torch (apt install python3-torch)").strip()
        else:
            self.version = torch[0].version
        key = hashlib.sha256()
        for part in [_FORMAT, sys.version, os.path.realpath(sys.executable), self.version,
                     "cuda-wheels" if cuda_wheels else self.cuda_home]:
            key.update(part.encode() + b"\0")
        for lock in self.locks:
            with open(lock, "rb") as f:
                key.update(f.read() + b"\0")
        self.cache = cache
        self.wheels = os.path.join(cache, "wheels")
        self.envs = os.path.join(cache, "torch-envs")
        flavour = "system" if self.system_torch else "cuda-wheels" if cuda_wheels else "cuda-home"
        self.name = "torch-%s-%s-%s" % (self.version, flavour, key.hexdigest()[:12])
        self.dir = os.path.join(self.envs, self.name)
        self.marker = os.path.join(self.dir, "magi-env.json")

    def read_marker(self):
        try:
            with open(self.marker) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def make(self):
        """Makes the environment unless it exists; returns its record (magi-env.json)."""
        record = self.read_marker()
        if record:
            return record
        os.makedirs(self.wheels, exist_ok=True)
        os.makedirs(self.envs, exist_ok=True)
        with open(os.path.join(self.cache, "torch-envs.lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _log("waiting for another torch_env.py to finish (lock %s)" % lock.name)
                fcntl.flock(lock, fcntl.LOCK_EX)
            record = self.read_marker()  # made by whoever held the lock
            return record or self._make_locked()

    def _make_locked(self):
        start = time.time()
        if os.path.exists(self.dir):
            _log("removing the incomplete environment %s" % self.dir)
            shutil.rmtree(self.dir)
        _log("making PyTorch %s (%s) in %s" % (
            self.version, "Debian's torch, with the lock's additions" if self.system_torch else
            "all CUDA wheels" if self.cuda_wheels else "CUDA libraries from " + self.cuda_home, self.dir))
        download_bytes, download_seconds = download_missing(self.requirements, self.wheels)
        install_start = time.time()
        _run([sys.executable, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if self.system_torch else []) +
             [self.dir], "python3 -m venv (Debian: apt install python3-venv)")
        python = os.path.join(self.dir, "bin", "python3")
        _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--find-links", self.wheels,
              "--no-deps", "--require-hashes", "--only-binary=:all:", "--disable-pip-version-check", "-q"] +
             [a for lock in self.locks for a in ("-r", lock)], "pip install")
        site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], "python3").strip()
        # The LibTorch to build against: the wheel's torch folder, or (system torch) Debian's
        # libtorch-dev, which the configure rule finds by itself.
        home = "" if self.system_torch else os.path.join(site, "torch")
        cuda = "" if self.system_torch else _torch_cuda_version(home)
        linked = []
        if cuda and not self.cuda_wheels:
            linked = link_cuda_libraries(site, self.cuda_home, cuda.split(".")[0])
        install_seconds = time.time() - install_start
        # The check that matters: the interpreter imports everything the build runs, with no
        # LD_LIBRARY_PATH (what Bazel's actions see), and has the pinned version.
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
        probe = _run([python, "-c", "import torch, torchvision, expecttest, numpy; "
                      "print(torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI))"], "importing torch", env=env).split()
        if probe[-2].split("+")[0] != self.version.split("+")[0]:
            raise EnvError("the environment imports torch %s, not the pinned %s" % (probe[-2], self.version))
        record = {
            "series": self.series,
            "torch_version": probe[-2],
            "cxx11_abi": int(probe[-1]),
            "cuda": cuda,
            "cuda_libraries": "" if not cuda else "wheels" if self.cuda_wheels else self.cuda_home,
            "linked_from_cuda_home": linked,
            "libtorch_home": home,
            "python": python,
            "locks": [os.path.relpath(lock, os.path.dirname(_HERE)) for lock in self.locks],
            "wheels": len(self.requirements),
            "wheel_bytes": sum(os.path.getsize(_cached_wheel(r, self.wheels)) for r in self.requirements),
            "downloaded_bytes": download_bytes,
            "download_seconds": round(download_seconds, 1),
            "install_seconds": round(install_seconds, 1),
            "total_seconds": round(time.time() - start, 1),
            "disk_bytes": _disk_bytes(self.dir),
            "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _write_json_atomically(self.marker, record)
        _log("PyTorch %s ready in %.0f s: %.2f GB on disk (%.2f GB of wheels, %.2f GB downloaded now)" % (
            record["torch_version"], record["total_seconds"], record["disk_bytes"] / 1e9, record["wheel_bytes"] / 1e9,
            download_bytes / 1e9))
        return record


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("series", help="PyTorch series with a lock file in tools/torch_env/ (2.12, 2.11, 1.13)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--shell", action="store_true", help="print export lines for LIBTORCH_HOME, MAGI_TORCH_PYTHON, ...")
    what.add_argument("--info", action="store_true", help="print what making the environment cost")
    parser.add_argument("--cuda-wheels", action="store_true", default=os.environ.get("MAGI_TORCH_CUDA_WHEELS") == "1",
                        help="install every nvidia-* wheel torch declares instead of using CUDA_HOME's libraries")
    args = parser.parse_args(argv)
    cache = os.environ.get("MAGI_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "magi")
    try:
        plan = Plan(args.series, args.cuda_wheels, cache)
        record = plan.make()
    except EnvError as e:
        _log("error: %s" % e)
        return 1
    if args.shell:
        # LIBTORCH_HOME empty (system torch): unset, so the configure rule takes Debian's.
        for key, value in (("LIBTORCH_HOME", record["libtorch_home"]), ("MAGI_TORCH_PYTHON", record["python"]),
                           ("MAGI_TORCH_VERSION", record["torch_version"].split("+")[0])):
            print("export %s='%s'" % (key, value) if value else "unset %s" % key)
    elif args.info:
        print("%s (%s)" % (plan.dir, plan.name))
        for key in sorted(record):
            print("  %-22s %s" % (key, record[key]))
    else:
        print(record["libtorch_home"] or "/usr")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
