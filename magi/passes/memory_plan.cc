#include "magi/passes/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/ir/collectives.h"

namespace magi {

bool IsViewOp(absl::string_view op) {
  size_t dot = op.find('.');
  absl::string_view base = dot == absl::string_view::npos ? op : op.substr(0, dot);
  for (absl::string_view view :
       {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::permute",
        "aten::expand", "aten::slice", "aten::select", "aten::narrow", "aten::as_strided", "aten::unsqueeze",
        "aten::squeeze", "aten::alias", "aten::detach", "aten::diagonal", "aten::unfold", "aten::view_as",
        "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::expand_as", "aten::numpy_T",
        "aten::movedim", "aten::swapaxes", "aten::unflatten", "aten::view_as_real", "aten::view_as_complex"}) {
    if (base == view) return true;
  }
  return false;
}

int64_t MemoryPlan::total_buffer_bytes() const {
  int64_t total = 0;
  for (int64_t size : buffer_sizes) total += size;
  return total;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  // Storage owner of each value (itself, or the base its view aliases).
  absl::flat_hash_map<const Value*, const Value*> owner;
  absl::flat_hash_map<const Value*, int64_t> bytes;
  absl::flat_hash_map<const Value*, int> born;  // -1: graph input
  absl::flat_hash_map<const Value*, int> dies;  // last program index that needs it; n: an output
  auto add_owner = [&](const Value* value, int index) -> absl::Status {
    if (value->type().is_future()) return absl::OkStatus();
    std::optional<int64_t> size = value->type().tensor().SizeInBytes();
    if (!size) {
      return absl::FailedPreconditionError(absl::StrCat("%", value->name(), " has a dynamic size"));
    }
    owner[value] = value;
    bytes[value] = *size;
    born[value] = index;
    dies[value] = index;
    return absl::OkStatus();
  };
  for (const Value* input : graph.inputs()) {
    absl::Status status = add_owner(input, -1);
    if (!status.ok()) return status;
  }
  absl::flat_hash_map<const Node*, int> index_of_start;
  for (int i = 0; i < n; ++i) {
    const Node* node = nodes[i];
    if (IsCollectiveStart(node->op())) index_of_start[node] = i;
    // A collective's buffers exist from its start: the runtime allocates the results
    // there and holds the inputs until the wait.
    int birth = i;
    if (node->op() == kWaitOp) {
      const Node* start = StartOfWait(*node);
      auto it = start == nullptr ? index_of_start.end() : index_of_start.find(start);
      if (it != index_of_start.end()) {
        birth = it->second;
        for (const Value* operand : start->operands()) {
          auto owner_it = owner.find(operand);
          if (owner_it != owner.end()) dies[owner_it->second] = std::max(dies[owner_it->second], i);
        }
      }
    }
    const Value* aliased = nullptr;
    if (IsViewOp(node->op()) && node->num_operands() > 0) aliased = owner.count(node->operand(0)) ? owner.at(node->operand(0)) : nullptr;
    for (const Value* result : node->results()) {
      if (aliased != nullptr) {
        owner[result] = aliased;
      } else {
        absl::Status status = add_owner(result, birth);
        if (!status.ok()) return status;
      }
    }
    for (const Value* operand : node->operands()) {
      auto it = owner.find(operand);
      if (it != owner.end()) dies[it->second] = std::max(dies[it->second], i);
    }
  }
  for (const GraphOutput& output : graph.outputs()) {
    auto it = owner.find(output.value);
    if (it != owner.end()) dies[it->second] = n;
  }

  MemoryPlan plan;
  plan.live_after.assign(n, 0);
  std::vector<int64_t> allocated(n, 0), freed(n, 0);
  int64_t live = 0;
  for (const auto& [value, size] : bytes) {
    if (born.at(value) < 0) {
      live += size;
    } else {
      allocated[born.at(value)] += size;
    }
    if (dies.at(value) >= 0 && dies.at(value) < n) freed[dies.at(value)] += size;
  }
  plan.peak_bytes = live;
  for (int i = 0; i < n; ++i) {
    live += allocated[i];  // results exist while the operands are still held
    if (live > plan.peak_bytes) {
      plan.peak_bytes = live;
      plan.peak_node = i;
    }
    live -= freed[i];
    plan.live_after[i] = live;
  }

  // Greedy first fit: storages by birth; a buffer is free once its storage is dead.
  std::vector<const Value*> storages;
  for (const auto& [value, size] : bytes) storages.push_back(value);
  std::sort(storages.begin(), storages.end(), [&](const Value* a, const Value* b) {
    return born.at(a) != born.at(b) ? born.at(a) < born.at(b) : bytes.at(a) > bytes.at(b);
  });
  std::vector<int> buffer_free_after;  // program index after which the buffer is free
  for (const Value* value : storages) {
    int buffer = -1;
    for (size_t b = 0; b < buffer_free_after.size(); ++b) {
      if (buffer_free_after[b] < born.at(value) && plan.buffer_sizes[b] >= bytes.at(value)) {
        buffer = static_cast<int>(b);
        break;
      }
    }
    if (buffer < 0) {
      buffer = static_cast<int>(plan.buffer_sizes.size());
      plan.buffer_sizes.push_back(bytes.at(value));
      buffer_free_after.push_back(0);
    }
    buffer_free_after[buffer] = dies.at(value);
    plan.buffer_of[value] = buffer;
  }
  return plan;
}

}  // namespace magi
