// Runs an AOTInductor package from C++: a .pt2 file that PyTorch's
// torch._inductor.aoti_compile_and_package made from an exported (aten-level) graph,
// holding the generated, compiled kernels. AotiPackage wraps LibTorch's
// torch::inductor::AOTIModelPackageLoader so that no exception crosses Magi's API: every
// c10::Error or std::exception LibTorch or the generated code throws becomes an
// absl::Status naming the package.
//
//   absl::StatusOr<std::unique_ptr<AotiPackage>> package = AotiPackage::Load("/tmp/mlp.pt2");
//   if (!package.ok()) return package.status();
//   absl::StatusOr<std::vector<at::Tensor>> outputs = (*package)->Run({x, w1, b1, w2, b2});
//
// Version differences (this is magi/compat): LibTorch 1.13 has no AOTInductor, so Load
// returns Unavailable there. 2.11 (the GPU machine's) and 2.12 (the roadmap's) have the
// loader with (path, model_name, run_single_threaded, num_runners, device_index); older
// 2.x releases are not tested and also report Unavailable.
//
// What it does not do: compile packages (that needs Python: torch._inductor), or know
// what inputs a package was compiled for. AOTInductor's generated code does not check
// input shapes, strides or dtypes unless the process sets AOTI_RUNTIME_CHECK_INPUTS=1:
// a wrong input silently gives wrong numbers (seen with 2.12: a [32,17] weight for a
// [32,16] one runs). Pass AotiOptions::input_types, which Run then checks.
#ifndef MAGI_COMPAT_AOTI_PACKAGE_H_
#define MAGI_COMPAT_AOTI_PACKAGE_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/ir/types.h"

namespace magi::compat {

// True when this LibTorch can load AOTInductor packages (2.11 and newer; see above).
bool AotInductorAvailable();

struct AotiOptions {
  // The model inside the package (aoti_compile_and_package writes "model").
  std::string model_name = "model";
  // One runner that is used from a single thread: required to capture Run in a CUDA
  // graph (seen on the GPU machine with 2.11: the default loader fails with "operation
  // not permitted when stream is capturing").
  bool run_single_threaded = false;
  // CUDA device of a CUDA package; -1: the current one. Ignored for CPU packages.
  int device_index = -1;
  // The types the package was compiled for, one per input; Run checks dtype, sizes
  // (kDynamicDim matches any), strides (empty: contiguous; ignored on size-1 dims) and
  // device type. Empty: no check (see the header comment).
  std::vector<TensorType> input_types;
};

// A loaded AOTInductor package. Run may be called from several threads unless
// run_single_threaded is set (then from one at a time).
class AotiPackage {
 public:
  // Loads the package at `path`. NotFound if there is no such file; InvalidArgument
  // naming the path and LibTorch's reason if it is not a loadable package;
  // Unavailable on a LibTorch without AOTInductor.
  static absl::StatusOr<std::unique_ptr<AotiPackage>> Load(const std::string& path, AotiOptions options = {});

  ~AotiPackage();
  AotiPackage(const AotiPackage&) = delete;
  AotiPackage& operator=(const AotiPackage&) = delete;

  // Runs the compiled graph on `inputs` (for CUDA packages on `stream`, a cudaStream_t;
  // nullptr: the current stream). InvalidArgument naming the input when inputs do not
  // match options.input_types; Internal with LibTorch's message for anything the loader
  // or the generated code throws (e.g. a wrong number of inputs without input_types).
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs, void* stream = nullptr);

  // The package's metadata (aoti_compile_and_package writes e.g. AOTI_DEVICE_KEY).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  AotiPackage(std::string path, AotiOptions options, std::unique_ptr<Impl> impl,
              std::map<std::string, std::string> metadata);
  absl::Status CheckInputs(const std::vector<at::Tensor>& inputs) const;

  std::string path_;
  AotiOptions options_;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace magi::compat

#endif  // MAGI_COMPAT_AOTI_PACKAGE_H_
