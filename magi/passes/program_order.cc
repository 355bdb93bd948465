#include "magi/passes/program_order.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "magi/passes/schedule_util.h"

namespace magi {

ProgramOrder::ProgramOrder(const Graph& graph) : nodes_(graph.nodes()) {
  slot_.reserve(nodes_.size());
  position_.resize(nodes_.size());
  for (int i = 0; i < size(); ++i) {
    slot_[nodes_[i]] = i;
    position_[i] = i;
  }
}

Node* ProgramOrder::After(const Node* node) const {
  int next = Position(node) + 1;
  return next < size() ? nodes_[next] : nullptr;
}

void ProgramOrder::Move(int from, int to) {
  if (to == from || to == from + 1) return;
  if (to < from) {
    std::rotate(nodes_.begin() + to, nodes_.begin() + from, nodes_.begin() + from + 1);
    for (int i = to; i <= from; ++i) position_[Slot(nodes_[i])] = i;
  } else {
    std::rotate(nodes_.begin() + from, nodes_.begin() + from + 1, nodes_.begin() + to);
    for (int i = from; i < to; ++i) position_[Slot(nodes_[i])] = i;
  }
}

void ProgramOrder::MoveBefore(Node* node, Node* before) {
  Move(Position(node), before == nullptr ? size() : Position(before));
}

bool ProgramOrder::HoistBefore(Node* node, Node* before, int max_moved) {
  int limit = Position(before);
  while (true) {
    if (Position(node) <= limit) return true;
    std::vector<Node*> to_move;
    absl::flat_hash_set<const Node*> seen;
    bool ok = true;
    std::function<void(Node*)> visit = [&](Node* n) {
      if (!ok || !seen.insert(n).second) return;
      for (const Value* operand : n->operands()) {
        Node* producer = operand->producer();
        if (producer == nullptr || Position(producer) < limit) continue;
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
    if (seen.contains(nodes_[limit])) {
      // `before` is itself an input of `node`: the earliest place is right after it.
      ++limit;
      continue;
    }
    std::sort(to_move.begin(), to_move.end(), [&](const Node* a, const Node* b) { return Position(a) < Position(b); });
    // Each lands right before the node that was at `limit` (which moves up one each time).
    Node* anchor = nodes_[limit];
    for (Node* n : to_move) MoveBefore(n, anchor);
    return true;
  }
}

Node* ProgramOrder::FirstUser(const Node& node) const {
  Node* first = nullptr;
  for (const Value* result : node.results()) {
    for (Node* user : result->Users()) {
      if (first == nullptr || Position(user) < Position(first)) first = user;
    }
  }
  return first;
}

void ProgramOrder::Apply(Graph& graph) const {
  for (Node* node : nodes_) graph.MoveBefore(node, nullptr);
}

}  // namespace magi
