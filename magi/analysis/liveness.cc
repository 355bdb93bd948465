#include "magi/analysis/liveness.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

// How a magi::call's results hold memory, from its callee's own liveness.
struct CallStorage {
  // Per result: the operand index (0..num_operands-1) or num_operands + the earlier result
  // index whose storage the callee returns it in (a view of its input, or of another
  // output), else -1 (a storage of its own).
  std::vector<int> alias;
  // Per result with a storage of its own: the bytes of the callee storage it is a view of
  // (larger than the result when it is one piece of a buffer the callee split, e.g. q of a
  // fused qkv: the other pieces are other results sharing it, or no result at all).
  std::vector<int64_t> bytes;
};

// Callees calling callees: deep enough for any nesting the partitioner makes; deeper (a
// cycle of calls, which the verifier does not rule out) is analyzed as opaque.
constexpr int kMaxCallDepth = 8;
thread_local int call_depth = 0;

CallStorage AnalyzeCall(const Node& call) {
  CallStorage storage{std::vector<int>(call.num_results(), -1), std::vector<int64_t>(call.num_results(), 0)};
  const Module* module = call.graph() != nullptr ? call.graph()->module() : nullptr;
  const Graph* callee = module != nullptr ? module->FindGraph(CalleeName(call)) : nullptr;
  if (callee == nullptr || callee == call.graph() || callee->outputs().size() != storage.alias.size() ||
      callee->inputs().size() != static_cast<size_t>(call.num_operands()) || call_depth >= kMaxCallDepth) {
    return storage;
  }
  ++call_depth;
  absl::StatusOr<Liveness> inner = ComputeLiveness(*callee);
  --call_depth;
  if (!inner.ok()) return storage;
  absl::flat_hash_map<int, int> first_with_storage;  // callee storage -> call operand / result slot
  for (int k = 0; k < static_cast<int>(callee->inputs().size()); ++k) {
    auto it = inner->storage_of.find(callee->inputs()[k]);
    if (it != inner->storage_of.end()) first_with_storage.try_emplace(it->second, k);
  }
  for (int j = 0; j < static_cast<int>(storage.alias.size()); ++j) {
    auto it = inner->storage_of.find(callee->outputs()[j].value);
    if (it == inner->storage_of.end()) continue;
    auto [slot, inserted] = first_with_storage.try_emplace(it->second, call.num_operands() + j);
    if (inserted) {
      storage.bytes[j] = inner->storages[it->second].bytes;
    } else {
      storage.alias[j] = slot->second;
    }
  }
  return storage;
}

}  // namespace

absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph, const LivenessOptions& options) {
  return ComputeLiveness(graph, graph.nodes(), options);
}

absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph, absl::Span<Node* const> nodes,
                                         const LivenessOptions& options) {
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
  // Host storages are only told apart when something computes on an accelerator.
  auto on = [](const Value* value, DeviceType type) {
    return value->type().is_tensor() && value->type().tensor().device.type == type;
  };
  bool accelerator = false;
  for (const Value* input : graph.inputs()) accelerator |= on(input, DeviceType::kCuda);
  for (const Node* node : nodes) {
    if (accelerator) break;
    for (const Value* result : node->results()) accelerator |= on(result, DeviceType::kCuda);
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
    const CallStorage call = node->op() == kCallOp ? AnalyzeCall(*node) : CallStorage();
    for (const Value* result : node->results()) {
      int shared = aliased;
      // A call result that the callee makes as a view of one of its inputs or of another
      // result shares that storage (a compiled partition returns such views, not copies).
      const int index = result->result_index();
      const int alias = index < static_cast<int>(call.alias.size()) ? call.alias[index] : -1;
      if (alias >= 0) {
        const Value* base = alias < node->num_operands() ? node->operand(alias)
                                                         : node->result(alias - node->num_operands());
        auto it = storage_of.find(base);
        if (it != storage_of.end()) shared = it->second;
      }
      if (shared >= 0) {
        storage_of[result] = shared;
      } else {
        absl::Status status = add_storage(result, birth, i);
        if (!status.ok()) return status;
        // One piece of a larger buffer the callee made: the whole buffer is held.
        if (index < static_cast<int>(call.bytes.size()) && !result->type().is_future()) {
          storages.back().bytes = std::max(storages.back().bytes, call.bytes[index]);
        }
      }
    }
    for (const Value* operand : node->operands()) extend(operand, i);
  }
  for (const GraphOutput& output : graph.outputs()) extend(output.value, n);
  if (options.inputs_held_by_caller) {
    absl::flat_hash_set<const Value*> donated;
    for (const GraphOutput& output : graph.outputs()) {
      if (output.aliases != nullptr) donated.insert(output.aliases);
    }
    for (const Value* input : graph.inputs()) {
      if (!donated.contains(input)) extend(input, n);
    }
  }

  // Donation: results written over a donated input at its last read take its storage.
  absl::flat_hash_map<const Node*, int> index_of;
  for (int i = 0; i < n; ++i) index_of[nodes[i]] = i;
  std::vector<int> merged_into(storages.size(), -1);
  for (const GraphOutput& output : graph.outputs()) {
    const Value* input = output.aliases;
    const Value* value = output.value;
    if (input == nullptr || value == nullptr || value == input || value->producer() == nullptr) continue;
    const Node* producer = value->producer();
    const int operand = InPlaceOperandOfResult(producer->op(), value->result_index());
    if (operand < 0 || operand >= producer->num_operands() || producer->operand(operand) != input) continue;
    auto in = storage_of.find(input);
    auto out = storage_of.find(value);
    if (in == storage_of.end() || out == storage_of.end() || in->second == out->second) continue;
    StorageLifetime& in_storage = storages[in->second];
    const StorageLifetime& out_storage = storages[out->second];
    if (out_storage.value != value || out_storage.bytes != in_storage.bytes ||
        in_storage.dies > index_of.at(producer) || merged_into[in->second] >= 0) {
      continue;  // a view, another size, read later, or already reused
    }
    in_storage.dies = std::max(in_storage.dies, out_storage.dies);
    merged_into[out->second] = in->second;
    merged_into[in->second] = in->second;  // taken
    liveness.in_place[value] = input;
  }
  if (accelerator) {
    for (StorageLifetime& storage : storages) storage.host = on(storage.value, DeviceType::kCpu);
  }
  if (!liveness.in_place.empty()) {
    // Drop the merged storages and renumber.
    std::vector<int> new_index(storages.size(), -1);
    std::vector<StorageLifetime> kept;
    for (size_t i = 0; i < storages.size(); ++i) {
      if (merged_into[i] >= 0 && merged_into[i] != static_cast<int>(i)) continue;
      new_index[i] = static_cast<int>(kept.size());
      kept.push_back(storages[i]);
    }
    for (auto& [value, index] : storage_of) {
      index = new_index[merged_into[index] >= 0 ? merged_into[index] : index];
    }
    storages = std::move(kept);
  }
  return liveness;
}

}  // namespace magi
