// FsdpInference: forward-only FSDP over the compile driver. One graph holds the
// all-gathers and the forward of `forward_fn`, run on this rank's shards (taken from the
// module, or from a FsdpTrainer checkpoint).
//
//   auto inference = magi::FsdpInference::Create(*model, forward, {tokens}, communicator);
//   std::vector<at::Tensor> logits = *(*inference)->Run({tokens});
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

class FsdpInference {
 public:
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const std::string& backend = "interpreter");
  // Collective: replaces the shards (and buffers) with those of the newest committed step
  // of a FsdpTrainer checkpoint under `root`, of any world size (resharded on load);
  // optimizer state in it is not read. It removes nothing there: a trainer may be saving
  // its next step meanwhile.
  absl::Status LoadShardsFromCheckpoint(const std::string& root);
  // Runs the forward on `inputs` (the example's shapes); returns its outputs (the forward
  // function's, in order; buffers it updates are kept for the next run).
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);
  const Graph& graph() const { return compiled_.graph(); }

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
