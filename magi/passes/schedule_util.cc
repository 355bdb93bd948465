#include "magi/passes/schedule_util.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "magi/analysis/op_traits.h"

namespace magi {

absl::flat_hash_map<const Node*, int> NodePositions(const Graph& graph) {
  absl::flat_hash_map<const Node*, int> positions;
  positions.reserve(graph.num_nodes());
  int i = 0;
  for (const Node* node : graph.nodes()) positions[node] = i++;
  return positions;
}

bool IsMovable(const Node& node) { return GetOpTraits(node.op()).movable(); }

int IndexOf(const std::vector<Node*>& order, const Node* node) {
  auto it = std::find(order.begin(), order.end(), node);
  return it == order.end() ? -1 : static_cast<int>(it - order.begin());
}

bool HoistBefore(Graph& graph, Node* node, Node* before, int max_moved) {
  std::vector<Node*> order = graph.nodes();
  int limit = IndexOf(order, before);
  const int at = IndexOf(order, node);
  if (at <= limit) return true;
  // Positions of the nodes from `before` to `node`: every producer that must move is
  // among them (producers come before their users), so nothing else needs a position.
  absl::flat_hash_map<const Node*, int> positions;
  positions.reserve(at - limit + 1);
  for (int i = limit; i <= at; ++i) positions[order[i]] = i;
  auto position = [&](const Node* n) {
    auto it = positions.find(n);
    return it == positions.end() ? -1 : it->second;
  };
  while (true) {
    if (at <= limit) return true;
    // Collect the producers that must move too, depth first, and check them.
    std::vector<Node*> to_move;
    absl::flat_hash_set<const Node*> seen;
    bool ok = true;
    std::function<void(Node*)> visit = [&](Node* n) {
      if (!ok || !seen.insert(n).second) return;
      for (const Value* operand : n->operands()) {
        Node* producer = operand->producer();
        if (producer == nullptr || position(producer) < limit) continue;
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
    std::sort(to_move.begin(), to_move.end(), [&](const Node* a, const Node* b) { return position(a) < position(b); });
    for (Node* n : to_move) graph.MoveBefore(n, order[limit]);
    return true;
  }
}

Node* FirstUserIn(const std::vector<Node*>& order, const Node& node) {
  absl::flat_hash_set<const Node*> users;
  for (const Value* result : node.results()) {
    for (Node* user : result->Users()) users.insert(user);
  }
  if (users.empty()) return nullptr;
  for (Node* candidate : order) {
    if (users.contains(candidate)) return candidate;
  }
  return nullptr;
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
