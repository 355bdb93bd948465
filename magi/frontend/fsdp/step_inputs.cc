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
