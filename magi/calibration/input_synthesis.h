// Inputs for timing kernels: tensors synthesized from the IR's tensor types, with values
// every op of a step accepts.
//
//   MAGI_ASSIGN_OR_RETURN(at::Tensor x, Synthesize(type, IndexBound(node)));
//
// Floating tensors are uniform in [0.5, 1) (no denormals, valid for log/sqrt/div), complex
// ones 0.75, integer tensors uniform in [1, n) with n the smallest dimension of the node's
// floating tensors (so they are valid indices, targets and divisors), booleans false; the
// IR's strides are honoured. Draws from the default generators: a calibration holds a
// RestoreGenerators while it synthesizes and runs kernels.
//
// What it does NOT do: tensors with dynamic sizes (FailedPrecondition), values a
// data-dependent op needs (a mask with some true entry, sorted indices).
#ifndef MAGI_CALIBRATION_INPUT_SYNTHESIS_H_
#define MAGI_CALIBRATION_INPUT_SYNTHESIS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/common/step_plan.h"
#include "magi/ir/graph.h"

namespace magi::calibration {

// The smallest dimension of the node's floating tensors: integer inputs below it are
// valid indices into them (embedding rows, classes of a loss, gather positions). 2 when the
// node has no floating tensor.
int64_t IndexBound(const Node& node);

// A tensor of `type` with values every op of the step accepts (above); integers in
// [1, index_bound) (zeros when index_bound < 2).
absl::StatusOr<at::Tensor> Synthesize(const TensorType& type, int64_t index_bound);

// The node's tensor operands synthesized (integers below IndexBound(node)), each with its
// slot in `step`.
absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> SynthesizeOperands(const Node& node, const StepPlan& step);

// `graph`'s inputs for a run of the whole graph: the default CPU generator's own state for
// an rng.state input, integers below every consumer's IndexBound (valid indices for all of
// them). FailedPrecondition (saying why) when an input cannot be made so.
absl::StatusOr<std::vector<at::Tensor>> SynthesizeGraphInputs(const Graph& graph);

// Puts the default random generators of the CPU and of `device` back as they were when it
// was made. Measuring runs kernels on synthesized inputs (uniform_, random_, rand, and the
// step's own random ops): without this a run that measured would draw other random numbers
// afterwards than one that found every kernel cached, and save another generator state in
// its checkpoint.
class RestoreGenerators {
 public:
  explicit RestoreGenerators(const at::Device& device);
  ~RestoreGenerators();
  RestoreGenerators(const RestoreGenerators&) = delete;
  RestoreGenerators& operator=(const RestoreGenerators&) = delete;

 private:
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> states_;
};

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_INPUT_SYNTHESIS_H_
