// Binds the inputs of a compiled FSDP step graph by name (internal to the FSDP frontend).
#ifndef MAGI_FRONTEND_FSDP_STEP_INPUTS_H_
#define MAGI_FRONTEND_FSDP_STEP_INPUTS_H_

#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

// The graph's inputs in order: `named` by name, `data` for input.N, and the default
// generator's current state for the rng input.
absl::StatusOr<std::vector<at::Tensor>> GatherStepInputs(const Graph& graph,
                                                         const std::map<std::string, at::Tensor>& named,
                                                         const std::vector<at::Tensor>& data);

// The buffers of `root` that `graph` reads (its inputs of role buffer, by name): the state
// a front end owns from Create on and feeds each step.
std::map<std::string, at::Tensor> BuffersTheGraphReads(const Graph& graph, torch::nn::Module& root);

// Replaces each buffer in `buffers` whose new value the step returned ("<buffer>.updated",
// capture's name for written inputs) with that value.
void TakeUpdatedBuffers(const Graph& graph, const std::vector<at::Tensor>& outputs,
                        std::map<std::string, at::Tensor>& buffers);

// The module's buffers by name, referenced (not copied).
std::map<std::string, at::Tensor> TakeBuffers(torch::nn::Module& root);

// Adds `buffers` and the lifted constants to `named`.
void AddBuffersAndConstants(const std::map<std::string, at::Tensor>& buffers,
                            const std::vector<std::pair<std::string, at::Tensor>>& constants,
                            std::map<std::string, at::Tensor>& named);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_STEP_INPUTS_H_
