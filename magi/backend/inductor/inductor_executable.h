// What the inductor backend compiles a partition into: a loaded AOTInductor package with
// the partition's input and output types (inductor_backend.h describes the backend).
//
//   auto* exe = dynamic_cast<inductor::InductorExecutable*>(executable.get());
//   exe->from_cache();     // true when the package was in the cache folder already
//   exe->package_path();   // .../packages/<sha256>.pt2; the FX program is next to it (.py)
#ifndef MAGI_BACKEND_INDUCTOR_INDUCTOR_EXECUTABLE_H_
#define MAGI_BACKEND_INDUCTOR_INDUCTOR_EXECUTABLE_H_

#include <memory>
#include <string>
#include <vector>

#include "magi/backend/torch_executable.h"
#include "magi/compat/aoti_package.h"

namespace magi::inductor {

// Where a package came from.
struct PackageInfo {
  std::string graph;         // the partition graph it was compiled for (the first of identical ones)
  std::string package_path;  // the .pt2
  std::string program_path;  // the FX program it was compiled from (.py)
  bool from_cache = false;
  double compile_seconds = 0;  // export + AOTInductor (0 when from the cache)
  int num_ops = 0;
};

class InductorExecutable : public TorchExecutable {
 public:
  // `input_types`/`input_names` describe the partition graph's inputs; `updated_inputs`
  // has one entry per output: the index of the input that output updates in place
  // (GraphOutput::aliases: the package writes it and does not return it; Run returns the
  // input), or -1 for an output the package returns.
  InductorExecutable(std::unique_ptr<compat::AotiPackage> package, std::vector<TensorType> input_types,
                     std::vector<std::string> input_names, std::vector<int> updated_inputs, PackageInfo info);

  absl::string_view backend_name() const override { return "inductor"; }
  // The package's key (the sha256 its file is named by): FX program, Inductor settings,
  // PyTorch version and device.
  std::string code_key() const override;
  // Runs the package on `inputs` (CUDA: on the current stream). InvalidArgument naming the
  // input when its dtype, sizes or device differ from the compiled ones; an input with
  // other strides is copied into the compiled strides first, except one the package
  // updates in place (InvalidArgument: the update would be lost in the copy).
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override;
  const RunStats& last_run_stats() const override { return stats_; }
  void set_profile_nodes(bool) override {}  // one opaque call: no per-node times
  absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator>) override;

  const PackageInfo& info() const { return info_; }
  bool from_cache() const { return info_.from_cache; }
  const std::string& package_path() const { return info_.package_path; }
  // Inputs copied into the compiled strides so far (see Run).
  int64_t restrided_inputs() const { return restrided_inputs_; }

 private:
  std::unique_ptr<compat::AotiPackage> package_;
  std::vector<TensorType> input_types_;
  std::vector<std::string> input_names_;
  std::vector<int> updated_inputs_;  // per output (see the constructor)
  int returned_outputs_ = 0;         // the outputs the package returns (updated_inputs_ -1)
  PackageInfo info_;
  RunStats stats_;
  int64_t restrided_inputs_ = 0;
  bool warned_restride_ = false;
};

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_INDUCTOR_EXECUTABLE_H_
