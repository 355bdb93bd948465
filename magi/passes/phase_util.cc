#include "magi/passes/phase_util.h"

#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {

int BackwardBoundary(const Graph& graph) { return BackwardBoundary(graph.nodes()); }

int BackwardBoundary(absl::Span<Node* const> nodes) {
  int position = 0;
  for (const Node* node : nodes) {
    // Collectives do not count: prefetching moves backward gathers into forward.
    if (node->annotations().phase == Phase::kBackward && !IsCommunication(node->op())) return position;
    ++position;
  }
  return -1;
}

const Value* GatheredShard(const Value* operand) {
  const Node* producer = operand->producer();
  if (producer != nullptr && producer->op() == kLocalShardOp && producer->num_operands() == 1) {
    // A rank's piece of an earlier gather's result (reshard_after_forward=<int>): gathering
    // the pieces again gathers that gather's shards.
    const Value* whole = producer->operand(0);
    const Node* wait = whole->producer();
    const Node* start = wait != nullptr && wait->op() == kWaitOp ? StartOfWait(*wait) : nullptr;
    if (start != nullptr && start->op() == kAllGatherStartOp && whole->result_index() < start->num_operands()) {
      return GatheredShard(start->operand(whole->result_index()));
    }
    return operand;
  }
  if (producer != nullptr && producer->op() == "aten::_to_copy" && producer->num_operands() == 1) {
    return producer->operand(0);
  }
  return operand;
}

absl::flat_hash_map<Value*, Value*> BackwardRegathers(const Graph& graph) {
  return BackwardRegathers(graph.nodes());
}

absl::flat_hash_map<Value*, Value*> BackwardRegathers(absl::Span<Node* const> nodes) {
  // (shard, gathered dtype) -> gathered value, separately for forward and backward gathers.
  using Key = std::pair<const Value*, DType>;
  absl::flat_hash_map<Key, Value*> forward_of_shard, backward_of_shard;
  for (const Node* node : nodes) {
    if (node->op() != kWaitOp) continue;
    const Node* start = StartOfWait(*node);
    if (start == nullptr || start->op() != kAllGatherStartOp || start->num_operands() != node->num_results()) continue;
    auto& table = start->annotations().phase == Phase::kBackward ? backward_of_shard : forward_of_shard;
    for (int i = 0; i < node->num_results(); ++i) {
      table.emplace(Key(GatheredShard(start->operand(i)), start->operand(i)->type().tensor().dtype), node->result(i));
    }
  }
  absl::flat_hash_map<Value*, Value*> regathers;
  for (const auto& [shard, forward] : forward_of_shard) {
    auto it = backward_of_shard.find(shard);
    if (it != backward_of_shard.end()) regathers[forward] = it->second;
  }
  return regathers;
}

}  // namespace magi
