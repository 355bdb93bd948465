// FsdpInference: forward-only FSDP over the compile driver. One graph holds the
// all-gathers and the forward of `forward_fn`, run on this rank's shards (taken from the
// module, or from a FsdpTrainer checkpoint).
//
//   auto inference = magi::FsdpInference::Create(*model, forward, {tokens}, communicator);
//   std::vector<at::Tensor> logits = *(*inference)->Run({tokens});
//
// Deterministic mode (InferenceOptions::deterministic, docs/deterministic.md) adds batch
// invariance: the forward is captured for ONE sequence and unrolled to the batch of the
// example inputs (the batch-invariant pass), so each sequence's outputs are bitwise those
// of a run holding it alone, whatever the batch size and the other sequences. Every
// input must then have the batch on dim 0, and so must every output.
#ifndef MAGI_FRONTEND_FSDP_INFERENCE_H_
#define MAGI_FRONTEND_FSDP_INFERENCE_H_

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/communicator.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fully_shard.h"

namespace magi {

struct InferenceOptions {
  std::string backend = "interpreter";  // the primary backend (see `magi registry`)
  // Deterministic and batch-invariant (see above). The process must have called
  // magi::EnableDeterministicMode() first; the ranks check they compiled one plan.
  bool deterministic = false;
  // Non-empty: the plan hash the forward must compile to, else Create fails.
  std::string expected_plan_hash;
};

class FsdpInference {
 public:
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const InferenceOptions& options);
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const std::string& backend = "interpreter") {
    InferenceOptions options;
    options.backend = backend;
    return Create(root, forward_fn, example_inputs, std::move(communicator), options);
  }
  // Collective: replaces the shards (and buffers) with those of the newest committed step
  // of a FsdpTrainer checkpoint under `root`, of any world size (resharded on load);
  // optimizer state in it is not read. It removes nothing there: a trainer may be saving
  // its next step meanwhile.
  absl::Status LoadShardsFromCheckpoint(const std::string& root);
  // Runs the forward on `inputs` (the example's shapes); returns its outputs (the forward
  // function's, in order; buffers it updates are kept for the next run).
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);
  const Graph& graph() const { return compiled_.graph(); }
  const Module& module() const { return compiled_.module(); }
  // The compiled plan's fingerprint (magi/compiler/plan_hash.h).
  const std::string& plan_hash() const { return compiled_.plan_hash; }

 private:
  FsdpInference() = default;
  std::vector<std::pair<std::string, at::Tensor>> constants_;
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;
  std::map<std::string, at::Tensor> shards_;  // "<param>.shard"
  std::map<std::string, at::Tensor> buffers_;  // the module buffers the graph reads
  std::map<std::string, std::vector<int64_t>> full_shapes_;  // of each shard, by shard name
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_INFERENCE_H_
