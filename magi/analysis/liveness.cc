#include "magi/analysis/liveness.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"

namespace magi {

absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph) { return ComputeLiveness(graph, graph.nodes()); }

absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph, absl::Span<Node* const> nodes) {
  Liveness liveness;
  liveness.num_nodes = static_cast<int>(nodes.size());
  std::vector<StorageLifetime>& storages = liveness.storages;
  absl::flat_hash_map<const Value*, int>& storage_of = liveness.storage_of;
  storage_of.reserve(graph.inputs().size() + 2 * nodes.size());
  // A storage lives from `born` to at least `made` (a collective's results exist from its
  // start to its wait even when nothing reads them).
  auto add_storage = [&](const Value* value, int born, int made) -> absl::Status {
    if (value->type().is_future()) return absl::OkStatus();
    absl::StatusOr<int64_t> size = value->type().tensor().CheckedSizeInBytes();
    if (!size.ok()) {
      if (size.status().code() == absl::StatusCode::kFailedPrecondition) {
        return absl::FailedPreconditionError(absl::StrCat("%", value->name(), " has a dynamic size"));
      }
      return absl::Status(size.status().code(), absl::StrCat("%", value->name(), ": ", size.status().message()));
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
  const int n = liveness.num_nodes;
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
  return liveness;
}

}  // namespace magi
