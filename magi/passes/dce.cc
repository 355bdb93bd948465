#include "magi/passes/dce.h"

#include <memory>

#include "absl/container/flat_hash_set.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/pass_registration.h"

namespace magi {

absl::StatusOr<bool> DeadCodeElimination::RunOnGraph(Graph& graph) {
  bool changed = false;
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph.outputs()) outputs.insert(output.value);
  std::vector<Node*> nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* node = *it;
    if (GetOpTraits(node->op()).side_effects) continue;
    bool dead = true;
    for (const Value* result : node->results()) {
      if (result->has_uses() || outputs.contains(result)) dead = false;
    }
    // A start is dead only when its wait is already gone (it then has no uses).
    if (!dead) continue;
    graph.EraseNode(node);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(DeadCodeElimination);

}  // namespace magi
