// Binds the inputs of a compiled FSDP step graph by name (internal to the FSDP frontend).
#ifndef MAGI_TRAINING_STEP_INPUTS_H_
#define MAGI_TRAINING_STEP_INPUTS_H_

#include <torch/nn/module.h>

#include <map>
#include <string>
#include <utility>
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

// The buffer an output named "<buffer>.updated" (capture's name for a written input)
// holds the new value of, or nullptr when `output` names no buffer of `buffers`.
at::Tensor* BufferUpdatedBy(const std::string& output, std::map<std::string, at::Tensor>& buffers);

// Replaces each buffer in `buffers` whose new value the step returned (BufferUpdatedBy)
// with that value.
void TakeUpdatedBuffers(const Graph& graph, const std::vector<at::Tensor>& outputs,
                        std::map<std::string, at::Tensor>& buffers);

// The module's buffers by name, referenced (not copied).
std::map<std::string, at::Tensor> TakeBuffers(torch::nn::Module& root);

// A trainer's step graph bound once to where its inputs come from and where its outputs
// go, so that a step moves tensors by index. Resolving ~450 inputs and outputs by name in
// string-keyed maps cost ~1 ms of host time per step of the 953M model on the GPU
// machine, with the device idle (a Kineto trace of the 953M step on one H200). The pointers are into the
// owner's maps and vector: rebind after replacing any of them wholesale (a checkpoint
// load); assigning entries is fine.
//
// Inputs, by name, in GatherStepInputs' order of precedence: a lifted constant, a buffer,
// one of `scalars` (the AdamW step scalars, by name), the state, else a per-step tensor
// (`.grad.acc` accumulators) taken from the map given to Gather; input.N from `data`; the
// rng input the default generator's state. Outputs: "loss", "grad_norm", a state entry
// (its new value), "<buffer>.updated" (the buffer's), else ignored.
class StepBindings {
 public:
  static absl::StatusOr<StepBindings> Bind(const Graph& graph, std::map<std::string, at::Tensor>& state,
                                           std::map<std::string, at::Tensor>& buffers,
                                           const std::vector<std::pair<std::string, at::Tensor>>& constants,
                                           const std::map<std::string, at::Tensor*>& scalars);

  // The graph's inputs in order. References the state (does not move it: a failed step
  // leaves the state as it was); moves the per-step tensors out of `per_step`.
  absl::StatusOr<std::vector<at::Tensor>> Gather(const std::vector<at::Tensor>& data,
                                                 std::map<std::string, at::Tensor>& per_step) const;

  // Hands a step's outputs (graph order) to the state and buffers; the loss and the
  // gradient norm (undefined tensors when the graph has none) are returned.
  struct Scalars {
    at::Tensor loss;
    at::Tensor grad_norm;
  };
  absl::StatusOr<Scalars> Take(std::vector<at::Tensor> outputs) const;

 private:
  enum class Source { kTensor, kData, kPerStep, kRng };
  struct Input {
    Source source;
    const at::Tensor* tensor = nullptr;  // kTensor
    size_t index = 0;                    // kData
    std::string name;                    // kPerStep, and for errors
  };
  enum class Sink { kIgnore, kLoss, kGradNorm, kTensor };
  struct Output {
    Sink sink = Sink::kIgnore;
    at::Tensor* tensor = nullptr;  // kTensor
  };
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
};

// Adds `buffers` and the lifted constants to `named`.
void AddBuffersAndConstants(const std::map<std::string, at::Tensor>& buffers,
                            const std::vector<std::pair<std::string, at::Tensor>>& constants,
                            std::map<std::string, at::Tensor>& named);

}  // namespace magi

#endif  // MAGI_TRAINING_STEP_INPUTS_H_
