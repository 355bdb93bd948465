// The Python that compiles partitions for the inductor backend, and what it offers.
//
//   PythonChoice choice = ChoosePython(/*configured=*/"");
//   absl::StatusOr<PythonTorch> torch = ProbePython(choice.path, script_path, cache_dir);
//   // torch->version == "2.12.1+cu130", torch->cuda_archs == {"sm_90"}
//
// The interpreter is, in order: the one configured (backend option `python`), else
// $MAGI_INDUCTOR_PYTHON, else the Python whose site-packages hold the LibTorch this process
// runs on (a venv's bin/python3 for tools/torch_env.py's environments, /usr/bin/python3.X
// for a pip install under /usr/local), else python3 on PATH. Its torch must be the same
// version as the LibTorch of the process: AOTInductor packages are loaded by that LibTorch.
//
// Probing runs `python aoti_compile.py --probe` (importing torch takes seconds), so its
// result is kept on disk under the cache folder, keyed by the interpreter's path and
// reused while the interpreter and torch's version.py keep their size and modification
// time. No LibTorch.
#ifndef MAGI_BACKEND_INDUCTOR_PYTHON_ENV_H_
#define MAGI_BACKEND_INDUCTOR_PYTHON_ENV_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace magi::inductor {

struct PythonChoice {
  std::string path;  // "" when none was found
  std::string how;   // why this one ("backend option python", "$MAGI_INDUCTOR_PYTHON", ...)
};

// Picks the interpreter (see the file comment). `libtorch_library` is the path of the
// loaded libtorch_cpu.so ("" if unknown).
PythonChoice ChoosePython(const std::string& configured, const std::string& libtorch_library);

// The Python next to a LibTorch installed as a Python package
// (PREFIX/lib/pythonX.Y/{site,dist}-packages/torch/lib/libtorch_cpu.so), or "".
std::string PythonOfTorchLibrary(const std::string& libtorch_library);

struct PythonTorch {
  std::string python;
  std::string version;    // torch.__version__, e.g. "2.12.1+cu130"
  std::string torch_dir;  // the torch package folder
  bool aoti = false;      // torch._inductor and torch.export are there
  std::vector<std::string> cuda_archs;  // "sm_90" per visible CUDA device, by index
};

// Probes `python` with the compile script at `script_path`; cached in
// `cache_dir`/probe/ (see the file comment). Unavailable naming the interpreter and its
// output when it cannot import torch.
absl::StatusOr<PythonTorch> ProbePython(const std::string& python, const std::string& script_path,
                                        const std::string& cache_dir);

// "2.12.1" from "2.12.1+cu130" or "2.12.1a0+git..." (the local part dropped).
std::string PublicVersion(const std::string& version);

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_PYTHON_ENV_H_
