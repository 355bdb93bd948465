#include "magi/frontend/fsdp/step_inputs.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace magi {

absl::StatusOr<std::vector<at::Tensor>> GatherStepInputs(const Graph& graph,
                                                         const std::map<std::string, at::Tensor>& named,
                                                         const std::vector<at::Tensor>& data) {
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const std::string& name = input->name();
    if (input->role() == InputRole::kRng) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      inputs.push_back(generator.get_state());
      continue;
    }
    size_t index = 0;
    if (absl::StartsWith(name, "input.") && absl::SimpleAtoi(name.substr(6), &index)) {
      if (index >= data.size()) {
        return absl::InvalidArgumentError(absl::StrCat("the graph needs ", name, "; ", data.size(), " given"));
      }
      inputs.push_back(data[index]);
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

void TakeUpdatedBuffers(const Graph& graph, const std::vector<at::Tensor>& outputs,
                        std::map<std::string, at::Tensor>& buffers) {
  const auto& graph_outputs = graph.outputs();
  for (size_t i = 0; i < graph_outputs.size() && i < outputs.size(); ++i) {
    const std::string& name = graph_outputs[i].name;
    if (!absl::EndsWith(name, ".updated")) continue;
    auto it = buffers.find(name.substr(0, name.size() - 8));
    if (it != buffers.end()) it->second = outputs[i];
  }
}

std::map<std::string, at::Tensor> TakeBuffers(torch::nn::Module& root) {
  std::map<std::string, at::Tensor> buffers;
  for (const auto& item : root.named_buffers()) buffers[item.key()] = item.value();
  return buffers;
}

void AddBuffersAndConstants(const std::map<std::string, at::Tensor>& buffers,
                            const std::vector<std::pair<std::string, at::Tensor>>& constants,
                            std::map<std::string, at::Tensor>& named) {
  for (const auto& [name, tensor] : buffers) named[name] = tensor;
  for (const auto& [name, tensor] : constants) named[name] = tensor;
}

}  // namespace magi
