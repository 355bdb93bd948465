// Whole-step capture: a LibTorch module's forward, loss and backward as one IR graph.
//
//   auto captured = magi::CaptureTrainingStep(model, [&](const std::vector<at::Tensor>& in) {
//     return torch::nn::functional::cross_entropy(model->forward(in[0]), in[1]);
//   }, {tokens, targets});
//   // captured->module holds graph @train_step with inputs
//   //   <parameter FQNs> {role = param}, <buffer FQNs> {role = buffer},
//   //   input.0, input.1, ..., constant.N (lifted), rng.state {role = rng} (if random ops ran)
//   // and outputs: loss, <parameter FQN>.grad for every parameter that got a gradient,
//   //   <input>.updated for every parameter or buffer the step wrote to (BatchNorm's
//   //   running_mean, running_var, num_batches_tracked), as the FX importer names them.
//
// The step runs for real while it is recorded (see capture_session.h for what is
// recorded and how): on real tensors, or on meta tensors when the model was built on
// the meta device, which allocates nothing (set CaptureOptions::device to the device
// the graph will run on). Gradients come from the backward pass LibTorch's autograd
// engine really runs.
//
// Capture has no side effects: the module's parameters, buffers and .grad tensors, the
// data inputs and the default generator's state are as they were before the call
// (inputs the step writes are copied before the write and restored; buffers and the
// generator state are copied up front). The graph's inputs are never written either:
// a stateful step returns the new state as <input>.updated, and its caller feeds that
// into the next step (FsdpTrainer does). A buffer changed by a kernel that does not
// declare the write is an error (Unimplemented, naming it), not a silent loss.
#ifndef MAGI_FRONTEND_CAPTURE_CAPTURE_H_
#define MAGI_FRONTEND_CAPTURE_CAPTURE_H_

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/module.h"

namespace magi {

struct CaptureOptions {
  // The device recorded in the graph; default: the device the capture ran on. Set it
  // when capturing on meta.
  std::optional<Device> device;
  // Lift tensors created before the step (not parameters or buffers) as constant inputs.
  bool allow_constants = true;
  // Name of the module and graph written.
  std::string module_name = "model";
};

// A captured graph and what is needed to feed it.
struct CapturedGraph {
  std::unique_ptr<Module> module;
  std::string graph_name;
  // Lifted constants, by input name.
  std::vector<std::pair<std::string, at::Tensor>> constants;
  // The default generator's state when capture started, if the step drew random numbers
  // (the "rng.state" input). Eager and compiled runs that start from the same state agree.
  std::optional<at::Tensor> rng_state;
  int64_t recorded_ops = 0;

  Graph* graph() const { return module->FindGraph(graph_name); }
};

// The training step: `loss_fn(inputs)` must return a scalar loss that requires grad.
using LossFunction = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
absl::StatusOr<CapturedGraph> CaptureTrainingStep(torch::nn::Module& model, const LossFunction& loss_fn,
                                                  const std::vector<at::Tensor>& inputs,
                                                  const CaptureOptions& options = {});

// Forward only (inference), under no-grad: outputs "output.0", "output.1", ...
using ForwardFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
absl::StatusOr<CapturedGraph> CaptureForward(torch::nn::Module& model, const ForwardFunction& forward_fn,
                                             const std::vector<at::Tensor>& inputs,
                                             const CaptureOptions& options = {});

// The tensors to feed the captured graph, in its input order: parameters and buffers
// from `model` (matched by name), `data` for input.N, the lifted constants, and
// `rng_state` (default: the state captured) for rng.state.
absl::StatusOr<std::vector<at::Tensor>> BindInputs(const CapturedGraph& captured, torch::nn::Module& model,
                                                   const std::vector<at::Tensor>& data,
                                                   const std::optional<at::Tensor>& rng_state = std::nullopt);

}  // namespace magi

#endif  // MAGI_FRONTEND_CAPTURE_CAPTURE_H_
