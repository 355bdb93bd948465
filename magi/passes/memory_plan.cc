#include "magi/passes/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/ir/collectives.h"

namespace magi {

bool IsViewOp(absl::string_view op) {
  size_t dot = op.find('.');
  absl::string_view base = dot == absl::string_view::npos ? op : op.substr(0, dot);
  for (absl::string_view view :
       {"aten::view",           "aten::_unsafe_view", "aten::_reshape_alias", "aten::t",
        "aten::transpose",      "aten::permute",      "aten::expand",         "aten::slice",
        "aten::select",         "aten::narrow",       "aten::as_strided",     "aten::unsqueeze",
        "aten::squeeze",        "aten::alias",        "aten::detach",         "aten::diagonal",
        "aten::unfold",         "aten::view_as",      "aten::split",          "aten::split_with_sizes",
        "aten::chunk",          "aten::unbind",       "aten::expand_as",      "aten::numpy_T",
        "aten::movedim",        "aten::swapaxes",     "aten::unflatten",      "aten::view_as_real",
        "aten::view_as_complex"}) {
    if (base == view) return true;
  }
  return false;
}

int64_t MemoryPlan::total_buffer_bytes() const {
  int64_t total = 0;
  for (int64_t size : buffer_sizes) total += size;
  return total;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, bool assign_buffers) {
  std::vector<Node*> nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  // One entry per storage; values map to the storage they own or (views) alias.
  struct Storage {
    const Value* value;
    int64_t bytes;
    int born;  // -1: graph input
    int dies;  // last program index that needs it; n: an output
  };
  std::vector<Storage> storages;
  absl::flat_hash_map<const Value*, int> storage_of;
  storage_of.reserve(graph.inputs().size() + 2 * nodes.size());
  // A storage lives from `born` to at least `made` (a collective's results exist from its
  // start to its wait even when nothing reads them).
  auto add_storage = [&](const Value* value, int born, int made) -> absl::Status {
    if (value->type().is_future()) return absl::OkStatus();
    std::optional<int64_t> size = value->type().tensor().SizeInBytes();
    if (!size) {
      return absl::FailedPreconditionError(absl::StrCat("%", value->name(), " has a dynamic size"));
    }
    storage_of[value] = static_cast<int>(storages.size());
    storages.push_back({value, *size, born, made});
    return absl::OkStatus();
  };
  auto extend = [&](const Value* value, int index) {
    auto it = storage_of.find(value);
    if (it != storage_of.end()) storages[it->second].dies = std::max(storages[it->second].dies, index);
  };
  for (const Value* input : graph.inputs()) {
    absl::Status status = add_storage(input, -1, -1);
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
        for (const Value* operand : start->operands()) extend(operand, i);
      }
    }
    int aliased = -1;
    if (node->num_operands() > 0 && IsViewOp(node->op())) {
      auto it = storage_of.find(node->operand(0));
      if (it != storage_of.end()) aliased = it->second;
    }
    for (const Value* result : node->results()) {
      if (aliased >= 0) {
        storage_of[result] = aliased;
      } else {
        absl::Status status = add_storage(result, birth, i);
        if (!status.ok()) return status;
      }
    }
    for (const Value* operand : node->operands()) extend(operand, i);
  }
  for (const GraphOutput& output : graph.outputs()) extend(output.value, n);

  MemoryPlan plan;
  plan.live_after.assign(n, 0);
  std::vector<int64_t> allocated(n, 0), freed(n, 0);
  int64_t live = 0;
  for (const Storage& storage : storages) {
    if (storage.born < 0) {
      live += storage.bytes;
    } else {
      allocated[storage.born] += storage.bytes;
    }
    if (storage.dies >= 0 && storage.dies < n) freed[storage.dies] += storage.bytes;
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
  if (!assign_buffers) return plan;

  // Greedy first fit: storages by birth; a buffer is free once its storage is dead.
  std::vector<int> order(storages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return storages[a].born != storages[b].born ? storages[a].born < storages[b].born
                                                : storages[a].bytes > storages[b].bytes;
  });
  std::vector<int> buffer_free_after;  // program index after which the buffer is free
  for (int index : order) {
    const Storage& storage = storages[index];
    int buffer = -1;
    for (size_t b = 0; b < buffer_free_after.size(); ++b) {
      if (buffer_free_after[b] < storage.born && plan.buffer_sizes[b] >= storage.bytes) {
        buffer = static_cast<int>(b);
        break;
      }
    }
    if (buffer < 0) {
      buffer = static_cast<int>(plan.buffer_sizes.size());
      plan.buffer_sizes.push_back(storage.bytes);
      buffer_free_after.push_back(0);
    }
    buffer_free_after[buffer] = storage.dies;
    plan.buffer_of[storage.value] = buffer;
  }
  return plan;
}

}  // namespace magi
