// A graph's program order as an editable vector, for passes that make many moves.
//
// Moving a node in a Graph is cheap, but asking where a node is afterwards means walking
// the node list (Graph::nodes(), NodePositions): a pass that moves hundreds of nodes in a
// 10k-node step and re-reads positions after each move spends its time rebuilding hash
// maps. ProgramOrder keeps the order in a vector with a position per node, updates only
// the range a move shifts, and writes the final order back to the graph once (Apply).
//
//   ProgramOrder order(graph);
//   order.HoistBefore(start, order.After(wait));   // same rules as schedule_util's HoistBefore
//   order.MoveBefore(wait, first_use);
//   order.Apply(graph);
//
// It does not add or erase nodes: a pass that does must Apply first and rebuild.
#ifndef MAGI_PASSES_PROGRAM_ORDER_H_
#define MAGI_PASSES_PROGRAM_ORDER_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "magi/ir/graph.h"

namespace magi {

class ProgramOrder {
 public:
  explicit ProgramOrder(const Graph& graph);

  int size() const { return static_cast<int>(nodes_.size()); }
  const std::vector<Node*>& nodes() const { return nodes_; }
  Node* at(int position) const { return nodes_[position]; }
  int Position(const Node* node) const { return position_[Slot(node)]; }
  // The node after `node`, or null at the end.
  Node* After(const Node* node) const;

  // Moves `node` right before `before` (to the end when null).
  void MoveBefore(Node* node, Node* before);
  // schedule_util.h's HoistBefore on this order: moves `node` right before `before`,
  // first moving the (movable) producers of its operands that sit after `before`, at most
  // `max_moved` of them; right after `before` if `before` is one of them. False (and no
  // change) if impossible.
  bool HoistBefore(Node* node, Node* before, int max_moved = 16);
  // The first node that uses a result of `node`, or null.
  Node* FirstUser(const Node& node) const;

  // Reorders `graph` (the graph this order was built from, with the same nodes) to this order.
  void Apply(Graph& graph) const;

 private:
  int Slot(const Node* node) const { return slot_.at(node); }
  // Moves nodes_[from] to position `to` (to <= from: earlier; to > from: later, landing at to - 1).
  void Move(int from, int to);

  std::vector<Node*> nodes_;
  absl::flat_hash_map<const Node*, int> slot_;  // node -> index into position_ (its place in the original order)
  std::vector<int> position_;
};

}  // namespace magi

#endif  // MAGI_PASSES_PROGRAM_ORDER_H_
