#include "magi/training/step_inputs.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace magi {
namespace {

// N of a batch input "input.N"; nullopt for any other name.
std::optional<size_t> DataInputIndex(const std::string& name) {
  size_t index = 0;
  if (absl::StartsWith(name, "input.") && absl::SimpleAtoi(name.substr(6), &index)) return index;
  return std::nullopt;
}

// What the step's rng input takes: the default CPU generator's current state.
at::Tensor DefaultGeneratorState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> GatherStepInputs(const Graph& graph,
                                                         const std::map<std::string, at::Tensor>& named,
                                                         const std::vector<at::Tensor>& data) {
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const std::string& name = input->name();
    if (input->role() == InputRole::kRng) {
      inputs.push_back(DefaultGeneratorState());
      continue;
    }
    if (std::optional<size_t> index = DataInputIndex(name)) {
      if (*index >= data.size()) {
        return absl::InvalidArgumentError(absl::StrCat("the graph needs ", name, "; ", data.size(), " given"));
      }
      inputs.push_back(data[*index]);
      continue;
    }
    auto it = named.find(name);
    if (it == named.end()) return absl::InternalError(absl::StrCat("no tensor for graph input %", name));
    inputs.push_back(it->second);
  }
  return inputs;
}

std::map<std::string, at::Tensor> BuffersTheGraphReads(const Graph& graph, torch::nn::Module& root) {
  std::map<std::string, at::Tensor> module_buffers;
  for (const auto& item : root.named_buffers()) module_buffers[item.key()] = item.value();
  std::map<std::string, at::Tensor> buffers;
  for (const Value* input : graph.inputs()) {
    if (input->role() != InputRole::kBuffer) continue;
    auto it = module_buffers.find(input->name());
    if (it != module_buffers.end()) buffers[it->first] = it->second;  // else a lifted constant
  }
  return buffers;
}

at::Tensor* BufferUpdatedBy(const std::string& output, std::map<std::string, at::Tensor>& buffers) {
  constexpr absl::string_view kUpdated = ".updated";
  if (!absl::EndsWith(output, kUpdated)) return nullptr;
  auto it = buffers.find(output.substr(0, output.size() - kUpdated.size()));
  return it != buffers.end() ? &it->second : nullptr;
}

void TakeUpdatedBuffers(const Graph& graph, const std::vector<at::Tensor>& outputs,
                        std::map<std::string, at::Tensor>& buffers) {
  const auto& graph_outputs = graph.outputs();
  for (size_t i = 0; i < graph_outputs.size() && i < outputs.size(); ++i) {
    if (at::Tensor* buffer = BufferUpdatedBy(graph_outputs[i].name, buffers)) *buffer = outputs[i];
  }
}

std::map<std::string, at::Tensor> TakeBuffers(torch::nn::Module& root) {
  std::map<std::string, at::Tensor> buffers;
  for (const auto& item : root.named_buffers()) buffers[item.key()] = item.value();
  return buffers;
}

absl::StatusOr<StepBindings> StepBindings::Bind(const Graph& graph, std::map<std::string, at::Tensor>& state,
                                                std::map<std::string, at::Tensor>& buffers,
                                                const std::vector<std::pair<std::string, at::Tensor>>& constants,
                                                const std::map<std::string, at::Tensor*>& scalars) {
  StepBindings bindings;
  for (const Value* input : graph.inputs()) {
    const std::string& name = input->name();
    Input bound{Source::kPerStep, nullptr, 0, name};
    if (input->role() == InputRole::kRng) {
      bound.source = Source::kRng;
    } else if (std::optional<size_t> index = DataInputIndex(name)) {
      bound.source = Source::kData;
      bound.index = *index;
    } else {
      // The last match wins, as in the named map GatherStepInputs reads.
      for (const auto& [constant_name, tensor] : constants) {
        if (constant_name == name) bound.tensor = &tensor;
      }
      if (bound.tensor == nullptr) {
        if (auto it = buffers.find(name); it != buffers.end()) {
          bound.tensor = &it->second;
        } else if (auto it = scalars.find(name); it != scalars.end()) {
          bound.tensor = it->second;
        } else if (auto it = state.find(name); it != state.end()) {
          bound.tensor = &it->second;
        }
      }
      if (bound.tensor != nullptr) bound.source = Source::kTensor;
    }
    bindings.inputs_.push_back(std::move(bound));
  }
  for (const GraphOutput& output : graph.outputs()) {
    Output bound;
    if (output.name == "loss") {
      bound.sink = Sink::kLoss;
    } else if (output.name == "grad_norm") {
      bound.sink = Sink::kGradNorm;
    } else if (auto it = state.find(output.name); it != state.end()) {
      bound = {Sink::kTensor, &it->second};
    } else if (at::Tensor* buffer = BufferUpdatedBy(output.name, buffers)) {
      bound = {Sink::kTensor, buffer};
    }
    bindings.outputs_.push_back(bound);
  }
  return bindings;
}

absl::StatusOr<std::vector<at::Tensor>> StepBindings::Gather(const std::vector<at::Tensor>& data,
                                                             std::map<std::string, at::Tensor>& per_step) const {
  std::vector<at::Tensor> inputs;
  inputs.reserve(inputs_.size());
  for (const Input& input : inputs_) {
    switch (input.source) {
      case Source::kTensor:
        inputs.push_back(*input.tensor);
        break;
      case Source::kData:
        if (input.index >= data.size()) {
          return absl::InvalidArgumentError(absl::StrCat("the graph needs ", input.name, "; ", data.size(), " given"));
        }
        inputs.push_back(data[input.index]);
        break;
      case Source::kPerStep: {
        auto it = per_step.find(input.name);
        if (it == per_step.end()) return absl::InternalError(absl::StrCat("no tensor for graph input %", input.name));
        inputs.push_back(std::move(it->second));
        break;
      }
      case Source::kRng:
        inputs.push_back(DefaultGeneratorState());
        break;
    }
  }
  return inputs;
}

absl::StatusOr<StepBindings::Scalars> StepBindings::Take(std::vector<at::Tensor> outputs) const {
  if (outputs.size() != outputs_.size()) {
    return absl::InternalError(
        absl::StrCat("the step returned ", outputs.size(), " outputs, its graph has ", outputs_.size()));
  }
  Scalars scalars;
  for (size_t i = 0; i < outputs.size(); ++i) {
    switch (outputs_[i].sink) {
      case Sink::kIgnore:
        break;
      case Sink::kLoss:
        scalars.loss = std::move(outputs[i]);
        break;
      case Sink::kGradNorm:
        scalars.grad_norm = std::move(outputs[i]);
        break;
      case Sink::kTensor:
        *outputs_[i].tensor = std::move(outputs[i]);
        break;
    }
  }
  return scalars;
}

void AddBuffersAndConstants(const std::map<std::string, at::Tensor>& buffers,
                            const std::vector<std::pair<std::string, at::Tensor>>& constants,
                            std::map<std::string, at::Tensor>& named) {
  for (const auto& [name, tensor] : buffers) named[name] = tensor;
  for (const auto& [name, tensor] : constants) named[name] = tensor;
}

}  // namespace magi
