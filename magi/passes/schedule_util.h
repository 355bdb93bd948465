// Helpers for passes that reorder nodes (bucketing, overlap scheduling, recompute).
//
// Program order is the schedule the runtime executes, so moving a node is a real
// decision. These helpers only make moves that keep every operand defined before
// its use; they never move communication or effectful nodes implicitly.
#ifndef MAGI_PASSES_SCHEDULE_UTIL_H_
#define MAGI_PASSES_SCHEDULE_UTIL_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "magi/ir/graph.h"

namespace magi {

// Program position of every node of `graph`.
absl::flat_hash_map<const Node*, int> NodePositions(const Graph& graph);

// True if `node` can be moved freely within its dependencies: no communication, no
// side effects, no randomness.
bool IsMovable(const Node& node);

// Moves `node` right before `before`, first moving any producers of its operands that
// sit after `before` (recursively; at most `max_moved` nodes in all, all movable).
// Does nothing and returns false if that is impossible. If `before` is itself one of
// those producers, `node` goes right after it instead (the earliest valid place).
// `node` itself may be a collective start (it is moved, but its producers must be movable).
bool HoistBefore(Graph& graph, Node* node, Node* before, int max_moved = 16);

// The first node (in program order) that uses a result of `node`, or null if only
// graph outputs (or nobody) use them.
Node* FirstUser(const Graph& graph, const Node& node, const absl::flat_hash_map<const Node*, int>& positions);

// The index of `node` in `order` (a snapshot of Graph::nodes()), or -1: a linear scan,
// cheaper than building a position map when a pass needs a few positions.
int IndexOf(const std::vector<Node*>& order, const Node* node);

// FirstUser by scanning `order` (a snapshot of Graph::nodes()).
Node* FirstUserIn(const std::vector<Node*>& order, const Node& node);

// Bytes of a value's tensor (0 for dynamic sizes).
int64_t ValueBytes(const Value& value);

// The string argument `name` of `node`, or "".
std::string StringArg(const Node& node, absl::string_view name);

}  // namespace magi

#endif  // MAGI_PASSES_SCHEDULE_UTIL_H_
