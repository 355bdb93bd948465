#include "magi/passes/cse.h"

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// A key that is equal exactly when two nodes compute the same thing: op, arguments
// (constants printed exactly, operands by identity) and result types.
std::string Signature(const Node& node) {
  std::string key = node.op();
  for (const Argument& arg : node.args()) {
    absl::StrAppend(&key, "|", arg.name, "=");
    if (arg.value.kind() == AttrKind::kOperand) {
      absl::StrAppend(&key, "v", reinterpret_cast<uintptr_t>(node.operand(arg.value.as_operand().index)));
    } else if (arg.value.kind() == AttrKind::kOperandList) {
      for (int index : arg.value.as_operand_list().indices) {
        absl::StrAppend(&key, index == OperandListRef::kNoOperand ? 0 : reinterpret_cast<uintptr_t>(node.operand(index)),
                        ";");
      }
    } else {
      absl::StrAppend(&key, AttrKindName(arg.value.kind()), ":", arg.value.ToString());
    }
  }
  for (const Value* result : node.results()) absl::StrAppend(&key, "->", result->type().ToString());
  return key;
}

}  // namespace

absl::StatusOr<bool> CommonSubexpressionElimination::RunOnGraph(Graph& graph) {
  bool changed = false;
  absl::flat_hash_map<std::string, Node*> seen;
  for (Node* node : graph.nodes()) {
    // Never merge effects, random draws or communication (each pair is its own).
    if (node->num_results() == 0 || !GetOpTraits(node->op()).movable()) continue;
    auto [it, inserted] = seen.emplace(Signature(*node), node);
    if (inserted) continue;
    Node* kept = it->second;
    for (int i = 0; i < node->num_results(); ++i) graph.ReplaceAllUsesWith(node->result(i), kept->result(i));
    graph.EraseNode(node);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(CommonSubexpressionElimination);

}  // namespace magi
