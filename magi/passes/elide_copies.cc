#include "magi/passes/elide_copies.h"

#include "magi/analysis/op_traits.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// The value whose storage `value` uses (itself unless it is a view).
const Value* StorageOwner(const Value* value) {
  while (value->producer() != nullptr && IsViewOp(value->producer()->op()) && value->producer()->num_operands() > 0) {
    value = value->producer()->operand(0);
  }
  return value;
}

bool SameStorageSize(const Value* value) {
  const Value* owner = StorageOwner(value);
  if (owner == value) return true;
  std::optional<int64_t> a = value->type().tensor().NumElements();
  std::optional<int64_t> b = owner->type().tensor().NumElements();
  return a && b && *a == *b;
}

}  // namespace

absl::StatusOr<bool> ElideCopies::RunOnGraph(Graph& graph) {
  bool changed = false;
  for (Node* node : graph.nodes()) {
    // aten::copy(self, src, non_blocking): the functional form; its result is a new tensor.
    if (node->op() != "aten::copy" || node->num_operands() != 2 || node->num_results() != 1) continue;
    Value* result = node->result(0);
    Value* source = node->operand(1);
    if (!result->type().is_tensor() || !source->type().is_tensor()) continue;
    if (!(result->type() == source->type())) continue;  // a cast, a layout change or a move
    if (!SameStorageSize(source)) continue;
    if (source->is_graph_input()) continue;  // an output must not start aliasing an input
    graph.ReplaceAllUsesWith(result, source);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(ElideCopies);

}  // namespace magi
