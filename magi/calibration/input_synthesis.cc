#include "magi/calibration/input_synthesis.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"

namespace magi::calibration {

int64_t IndexBound(const Node& node) {
  int64_t bound = std::numeric_limits<int64_t>::max();
  auto visit = [&](const Value* value) {
    if (!value->type().is_tensor() || !IsFloatingPoint(value->type().tensor().dtype)) return;
    for (int64_t size : value->type().tensor().sizes) {
      if (size > 0) bound = std::min(bound, size);
    }
  };
  for (const Value* operand : node.operands()) visit(operand);
  for (const Value* result : node.results()) visit(result);
  return bound == std::numeric_limits<int64_t>::max() ? 2 : bound;
}

absl::StatusOr<at::Tensor> Synthesize(const TensorType& type, int64_t index_bound) {
  if (type.HasDynamicDims()) return absl::FailedPreconditionError(absl::StrCat(type.ToString(), " has dynamic sizes"));
  MAGI_ASSIGN_OR_RETURN(c10::ScalarType scalar_type, compat::ToScalarType(type.dtype));
  at::TensorOptions options = at::TensorOptions().dtype(scalar_type).device(compat::ToTorchDevice(type.device));
  std::vector<int64_t> strides = type.strides.empty() ? ContiguousStrides(type.sizes) : type.strides;
  // The storage the strides span (expanded dims, stride 0, share elements): filled flat,
  // then viewed with the IR's strides.
  int64_t storage = 1;
  for (size_t d = 0; d < type.sizes.size(); ++d) {
    if (type.sizes[d] == 0) storage = 0;
    if (storage > 0) storage += (type.sizes[d] - 1) * strides[d];
  }
  return compat::CallTorch(absl::StrCat("cannot make a ", type.ToString()), [&] {
    at::Tensor tensor = at::empty({storage}, options);
    if (scalar_type == at::kBool) {
      tensor.fill_(false);
    } else if (at::isFloatingType(scalar_type)) {
      tensor.uniform_(0.5, 1.0);
    } else if (at::isComplexType(scalar_type)) {
      tensor.fill_(0.75);
    } else if (index_bound >= 2) {
      tensor.random_(1, index_bound);
    } else {
      tensor.zero_();
    }
    return tensor.as_strided(type.sizes, strides);
  });
}

absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> SynthesizeOperands(const Node& node, const StepPlan& step) {
  const int64_t bound = IndexBound(node);
  std::vector<std::pair<int, at::Tensor>> operands;
  for (const Value* operand : node.operands()) {
    if (!operand->type().is_tensor()) continue;
    MAGI_ASSIGN_OR_RETURN(at::Tensor tensor, Synthesize(operand->type().tensor(), bound));
    operands.emplace_back(step.slot_of.at(operand), std::move(tensor));
  }
  return operands;
}

absl::StatusOr<std::vector<at::Tensor>> SynthesizeGraphInputs(const Graph& graph) {
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    if (!input->type().is_tensor()) {
      return absl::FailedPreconditionError(absl::StrCat("%", input->name(), " is not a tensor"));
    }
    if (input->role() == InputRole::kRng) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      at::Tensor state;
      {
        std::lock_guard<std::mutex> lock(generator.mutex());
        state = generator.get_state();
      }
      absl::StatusOr<c10::ScalarType> dtype = compat::ToScalarType(input->type().tensor().dtype);
      if (!dtype.ok() || state.scalar_type() != *dtype || state.sizes().vec() != input->type().tensor().sizes) {
        return absl::FailedPreconditionError(absl::StrCat("%", input->name(), " is not this generator's state"));
      }
      inputs.push_back(state);
      continue;
    }
    int64_t bound = std::numeric_limits<int64_t>::max();
    for (const Use& use : input->uses()) bound = std::min(bound, IndexBound(*use.user));
    if (bound == std::numeric_limits<int64_t>::max()) bound = 2;
    MAGI_ASSIGN_OR_RETURN(at::Tensor tensor, Synthesize(input->type().tensor(), bound));
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

RestoreGenerators::RestoreGenerators(const at::Device& device) {
  generators_.push_back(at::detail::getDefaultCPUGenerator());
  if (!device.is_cpu()) generators_.push_back(at::globalContext().defaultGenerator(device));
  for (at::Generator& generator : generators_) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    states_.push_back(generator.get_state());
  }
}

RestoreGenerators::~RestoreGenerators() {
  for (size_t i = 0; i < generators_.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators_[i].mutex());
    generators_[i].set_state(states_[i]);
  }
}

}  // namespace magi::calibration
