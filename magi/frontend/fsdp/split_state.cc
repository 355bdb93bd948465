#include "magi/frontend/fsdp/split_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/backend/common/split_tensor.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_status.h"

namespace magi {

std::vector<std::string> SplitStateNames(const Graph& graph, const std::map<std::string, at::Tensor>& state) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state) {
    if (graph.FindValue(name) == nullptr && graph.FindValue(name + ".hi") != nullptr &&
        graph.FindValue(name + ".lo") != nullptr && graph.FindValue(name + ".hi")->is_graph_input() &&
        graph.FindValue(name + ".lo")->is_graph_input()) {
      names.push_back(name);
    }
  }
  return names;
}

absl::Status SplitStateEntries(const std::vector<std::string>& names, std::map<std::string, at::Tensor>& state) {
  for (const std::string& name : names) {
    auto it = state.find(name);
    if (it == state.end() || it->second.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat("cannot split state entry ", name, ": ",
                                                     it == state.end() ? "no such entry" : "not float32"));
    }
    std::pair<at::Tensor, at::Tensor> halves;
    MAGI_RETURN_IF_ERROR(compat::CallTorch(absl::StrCat("splitting state entry ", name),
                                           [&] { halves = SplitTensorToBf16(it->second); }));
    // One entry at a time: the fp32 tensor goes before the next is split, so the state
    // never needs more than one tensor's worth of extra memory.
    state.erase(it);
    state[name + ".hi"] = std::move(halves.first);
    state[name + ".lo"] = std::move(halves.second);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, at::Tensor>> JoinedState(const std::vector<std::string>& names,
                                                              const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> joined = state;
  for (const std::string& name : names) {
    // c10::Error, or std::out_of_range for a missing half.
    MAGI_RETURN_IF_ERROR(compat::CallTorch(absl::StrCat("joining state entry ", name), [&] {
      // On the host, which is where a checkpoint writes from: no device memory for a copy
      // of every master.
      joined[name] = JoinSplitTensor(state.at(name + ".hi").cpu(), state.at(name + ".lo").cpu());
    }));
    joined.erase(name + ".hi");
    joined.erase(name + ".lo");
  }
  return joined;
}

std::map<std::string, at::Tensor> JoinedStateLike(const std::vector<std::string>& names,
                                                  const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> like = state;
  for (const std::string& name : names) {
    const at::Tensor& hi = state.at(name + ".hi");
    like[name] = at::empty({}, hi.options().dtype(at::kFloat)).expand(hi.sizes());
    like.erase(name + ".hi");
    like.erase(name + ".lo");
  }
  return like;
}

absl::StatusOr<at::Tensor> JoinedEntry(const std::string& name, const std::map<std::string, at::Tensor>& state) {
  auto it = state.find(name);
  if (it != state.end()) return it->second;
  return compat::CallTorch(absl::StrCat("joining state entry ", name),
                           [&] { return JoinSplitTensor(state.at(name + ".hi"), state.at(name + ".lo")); });
}

}  // namespace magi
