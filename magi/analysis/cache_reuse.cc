#include "magi/analysis/cache_reuse.h"

#include "magi/analysis/op_traits.h"

namespace magi {
namespace {

int64_t TensorBytes(const Value& value) {
  return value.type().is_tensor() ? value.type().tensor().SizeInBytes().value_or(0) : 0;
}

// The value whose producer wrote `value`'s storage: views followed back to their base.
const Value& StorageOf(const Value& value) {
  const Value* storage = &value;
  while (!storage->is_graph_input()) {
    const Node& producer = *storage->producer();
    const OpTraits traits = GetOpTraits(producer.op());
    if (!traits.view) break;
    const int alias = traits.alias_operand;
    if (alias < 0 || alias >= producer.num_operands()) break;
    storage = producer.operand(alias);
  }
  return *storage;
}

}  // namespace

OperandCacheModel::OperandCacheModel(const Graph& graph) {
  touched_before_.push_back(0);
  for (const Node* node : graph.nodes()) {
    position_[node] = static_cast<int>(touched_before_.size()) - 1;
    int64_t touched = 0;
    if (!IsViewOp(node->op())) {
      for (const Value* value : node->operands()) touched += TensorBytes(*value);
      for (const Value* value : node->results()) touched += TensorBytes(*value);
    }
    touched_before_.push_back(touched_before_.back() + touched);
  }
}

std::vector<bool> OperandCacheModel::OperandsInCache(const Node& node, int64_t cache_bytes) const {
  std::vector<bool> in_cache;
  auto consumer = position_.find(&node);
  for (const Value* operand : node.operands()) {
    if (!operand->type().is_tensor()) continue;
    const Value& storage = StorageOf(*operand);
    bool warm = false;
    if (cache_bytes > 0 && consumer != position_.end() && !storage.is_graph_input()) {
      auto producer = position_.find(storage.producer());
      warm = producer != position_.end() && producer->second < consumer->second &&
             touched_before_[consumer->second] - touched_before_[producer->second] <= cache_bytes;
    }
    in_cache.push_back(warm);
  }
  return in_cache;
}

}  // namespace magi
