#include "magi/passes/schedule_util.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "magi/analysis/op_traits.h"

namespace magi {

absl::flat_hash_map<const Node*, int> NodePositions(const Graph& graph) {
  absl::flat_hash_map<const Node*, int> positions;
  int i = 0;
  for (const Node* node : graph.nodes()) positions[node] = i++;
  return positions;
}

bool IsMovable(const Node& node) { return GetOpTraits(node.op()).movable(); }

bool HoistBefore(Graph& graph, Node* node, Node* before, int max_moved) {
  std::vector<Node*> order = graph.nodes();
  absl::flat_hash_map<const Node*, int> positions;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) positions[order[i]] = i;
  int limit = positions.at(before);
  while (true) {
    if (positions.at(node) <= limit) return true;
    // Collect the producers that must move too, depth first, and check them.
    std::vector<Node*> to_move;
    absl::flat_hash_set<const Node*> seen;
    bool ok = true;
    std::function<void(Node*)> visit = [&](Node* n) {
      if (!ok || !seen.insert(n).second) return;
      for (const Value* operand : n->operands()) {
        Node* producer = operand->producer();
        if (producer == nullptr || positions.at(producer) < limit) continue;
        if (!IsMovable(*producer)) {
          ok = false;
          return;
        }
        visit(producer);
      }
      to_move.push_back(n);  // after its producers
      if (static_cast<int>(to_move.size()) > max_moved + 1) ok = false;
    };
    visit(node);
    if (!ok) return false;
    if (seen.contains(order[limit])) {
      // `before` is itself an input of `node`: the earliest place is right after it.
      ++limit;
      continue;
    }
    std::sort(to_move.begin(), to_move.end(),
              [&](const Node* a, const Node* b) { return positions.at(a) < positions.at(b); });
    for (Node* n : to_move) graph.MoveBefore(n, order[limit]);
    return true;
  }
}

Node* FirstUser(const Graph& graph, const Node& node, const absl::flat_hash_map<const Node*, int>& positions) {
  Node* first = nullptr;
  for (const Value* result : node.results()) {
    for (Node* user : result->Users()) {
      if (first == nullptr || positions.at(user) < positions.at(first)) first = user;
    }
  }
  return first;
}

int64_t ValueBytes(const Value& value) { return value.type().tensor().SizeInBytes().value_or(0); }

std::string StringArg(const Node& node, absl::string_view name) {
  const Attribute* attr = node.FindArg(name);
  return attr != nullptr && attr->kind() == AttrKind::kString ? attr->as_string() : "";
}

}  // namespace magi
