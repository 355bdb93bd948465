#include "magi/passes/align_collectives.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// A node beside which a partition cut costs nothing: its inputs and outputs are in memory
// whatever a fusing backend does around it, or it is never fused or moved anyway.
bool IsAnchor(const Node& node, const ExtraAnchor& extra_anchor) {
  const OpTraits traits = GetOpTraits(node.op());
  if (traits.matmul_like() || !traits.movable() || node.op() == kCallOp) return true;
  return extra_anchor != nullptr && extra_anchor(node);
}

// A view moves no data, so it is looked through, unless the caller makes it an anchor (a
// backend that declines it cuts there).
bool LookThrough(const Node& node, const ExtraAnchor& extra_anchor) {
  return IsViewOp(node.op()) && (extra_anchor == nullptr || !extra_anchor(node));
}

// Whether a group placed before rest[at] (at == rest.size(): at the end) has an anchor, or
// the graph's start or end, as its nearest neighbour on one side, views looked through.
bool HasAnchorBeside(const std::vector<Node*>& rest, int at, const ExtraAnchor& extra_anchor) {
  int before = at - 1;
  while (before >= 0 && LookThrough(*rest[before], extra_anchor)) --before;
  if (before < 0 || IsAnchor(*rest[before], extra_anchor)) return true;
  int after = at;
  while (after < static_cast<int>(rest.size()) && LookThrough(*rest[after], extra_anchor)) ++after;
  return after == static_cast<int>(rest.size()) || IsAnchor(*rest[after], extra_anchor);
}

// Whether the group may be moved across `node` at all: compute that may be reordered.
// (Every other node is an anchor, so the searches below stop beside it first; this keeps
// them from crossing one whatever the anchors say.)
bool Crossable(const Node& node) {
  return !IsCommunication(node.op()) && GetOpTraits(node.op()).movable() && node.op() != kCallOp;
}

bool UsesAny(const Node& node, const absl::flat_hash_set<const Value*>& values) {
  for (const Value* operand : node.operands()) {
    if (values.contains(operand)) return true;
  }
  return false;
}

// A node that exists only to feed collectives (every use of its results is a collective
// start: a gradient's cast to the reduction dtype, a bucket's flattening). It goes where
// the collectives go, so it neither pins them nor counts as a boundary of its own.
bool FeedsOnlyCollectives(const Node& node) {
  if (!Crossable(node) || GetOpTraits(node.op()).matmul_like() || node.num_results() == 0) return false;
  for (const Value* result : node.results()) {
    if (!result->has_uses()) return false;
    for (const Use& use : result->uses()) {
      if (!IsCollectiveStart(use.user->op())) return false;
    }
  }
  return true;
}

struct Group {
  int begin = 0;  // index in program order of the first node
  int end = 0;    // one past the last
};

// The nodes groups are made of: communication and what only feeds it. Moves change no
// uses, so this is computed once.
absl::flat_hash_set<const Node*> GroupMembers(const Graph& graph) {
  absl::flat_hash_set<const Node*> members;
  for (const Node* node : graph.nodes()) {
    if (IsCommunication(node->op()) || FeedsOnlyCollectives(*node)) members.insert(node);
  }
  return members;
}

// The groups of `order` in program order: maximal runs of members with at least one
// communication node.
std::vector<Group> FindGroups(const std::vector<Node*>& order, const absl::flat_hash_set<const Node*>& members) {
  std::vector<Group> groups;
  const int n = static_cast<int>(order.size());
  for (int i = 0; i < n;) {
    if (!members.contains(order[i])) {
      ++i;
      continue;
    }
    Group group{i, i};
    bool communicates = false;
    while (group.end < n && members.contains(order[group.end])) {
      communicates = communicates || IsCommunication(order[group.end]->op());
      ++group.end;
    }
    if (communicates) groups.push_back(group);
    i = group.end;
  }
  return groups;
}

// For each place before rest[i] (i in [0, rest.size()]): how many collectives started in
// `rest` before it have not been waited for before it (in flight there).
std::vector<int> InFlight(const std::vector<Node*>& rest) {
  std::vector<int> in_flight(rest.size() + 1, 0);
  absl::flat_hash_set<const Node*> open;
  for (size_t i = 0; i < rest.size(); ++i) {
    in_flight[i] = static_cast<int>(open.size());
    const Node& node = *rest[i];
    if (IsCollectiveStart(node.op())) {
      open.insert(&node);
    } else if (node.op() == kWaitOp) {
      for (const Value* future : node.operands()) open.erase(future->producer());
    }
  }
  in_flight[rest.size()] = static_cast<int>(open.size());
  return in_flight;
}

// Where the group order[group.begin, group.end) should go: an index into `rest` (the
// other nodes in order) to move it before (rest.size(): to the end), or -1 to leave it.
int ChooseTarget(const std::vector<Node*>& order, const Group& group, const std::vector<Node*>& rest, int max_nodes,
                 const ExtraAnchor& extra_anchor) {
  const int home = group.begin;  // the group sits before rest[home]
  if (HasAnchorBeside(rest, home, extra_anchor)) return -1;
  absl::flat_hash_set<const Value*> results;  // what the group produces
  absl::flat_hash_set<const Node*> in_group;
  for (int i = group.begin; i < group.end; ++i) {
    in_group.insert(order[i]);
    for (const Value* result : order[i]->results()) results.insert(result);
  }
  // Overlap: a start whose wait is elsewhere would start its collective later if moved
  // down; a wait whose start is elsewhere would block the stream sooner if moved up. Such
  // groups only move the way that keeps (or adds) overlap; a group holding its starts'
  // waits runs its collectives exposed wherever it sits, so it may go either way.
  bool lone_start = false, lone_wait = false;
  for (int i = group.begin; i < group.end; ++i) {
    const Node& node = *order[i];
    if (IsCollectiveStart(node.op())) {
      for (const Value* future : node.results()) {
        for (const Use& use : future->uses()) lone_start = lone_start || !in_group.contains(use.user);
      }
    } else if (node.op() == kWaitOp) {
      for (const Value* future : node.operands()) {
        lone_wait = lone_wait || future->is_graph_input() || !in_group.contains(future->producer());
      }
    }
  }
  // A group that holds its starts' waits runs exposed wherever it sits, unless another
  // collective is in flight there: its collective then queues behind that one, and moving
  // it changes what computes while the other runs (up, it would wait for the other sooner).
  // So it moves only through places where nothing is in flight.
  const bool paired = !lone_start && !lone_wait;
  const std::vector<int> in_flight = paired ? InFlight(rest) : std::vector<int>();
  auto blocked = [&](int at) { return paired && in_flight[at] > 0; };
  if (blocked(home)) return -1;
  // Later: across rest[home], rest[home + 1], ... while none of them reads the group.
  int later = -1;
  for (int at = home + 1; !lone_start && at <= static_cast<int>(rest.size()) && at - home <= max_nodes; ++at) {
    const Node& crossed = *rest[at - 1];
    if (!Crossable(crossed) || UsesAny(crossed, results) || blocked(at)) break;
    if (HasAnchorBeside(rest, at, extra_anchor)) {
      later = at;
      break;
    }
  }
  // Earlier: across rest[home - 1], rest[home - 2], ... while the group reads none of them.
  int earlier = -1;
  for (int at = home - 1; !lone_wait && at >= 0 && home - at <= max_nodes; --at) {
    const Node& crossed = *rest[at];
    if (!Crossable(crossed) || blocked(at)) break;
    bool read = false;
    for (const Value* result : crossed.results()) {
      for (const Use& use : result->uses()) read = read || in_group.contains(use.user);
    }
    if (read) break;
    if (HasAnchorBeside(rest, at, extra_anchor)) {
      earlier = at;
      break;
    }
  }
  if (later < 0) return earlier;
  if (earlier < 0) return later;
  const int later_distance = later - home, earlier_distance = home - earlier;
  return later_distance < earlier_distance ? later : earlier;  // a tie: the collectives start earlier
}

}  // namespace

int AlignCollectives(Graph& graph, int max_nodes, const ExtraAnchor& extra_anchor) {
  const absl::flat_hash_set<const Node*> members = GroupMembers(graph);
  int moves = 0;
  // One group at a time, in program order. A moved group may land next to other members
  // (another group, or a cast that feeds it) and grow; the grown group is looked at again
  // from its new place. Groups only ever grow (members move together), so this ends.
  std::vector<Node*> order = graph.nodes();
  std::vector<Group> groups = FindGroups(order, members);
  for (int index = 0; index < static_cast<int>(groups.size());) {
    const Group group = groups[index];
    std::vector<Node*> rest;
    rest.reserve(order.size() - (group.end - group.begin));
    rest.insert(rest.end(), order.begin(), order.begin() + group.begin);
    rest.insert(rest.end(), order.begin() + group.end, order.end());
    const int target = ChooseTarget(order, group, rest, max_nodes, extra_anchor);
    if (target < 0) {
      ++index;
      continue;
    }
    Node* before = target < static_cast<int>(rest.size()) ? rest[target] : nullptr;
    for (int i = group.begin; i < group.end; ++i) {
      graph.MoveBefore(order[i], before);
      // A schedule position from schedule-overlap no longer holds (other passes that add or
      // move nodes reset it too).
      order[i]->mutable_annotations().schedule = -1;
    }
    ++moves;
    const Node* first = order[group.begin];
    order = graph.nodes();
    groups = FindGroups(order, members);
    for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
      if (std::find(order.begin() + groups[i].begin, order.begin() + groups[i].end, first) ==
          order.begin() + groups[i].end) {
        continue;
      }
      const bool grew = groups[i].end - groups[i].begin > group.end - group.begin;
      index = grew ? i : i + 1;
      break;
    }
  }
  return moves;
}

const OptionSchema<AlignCollectivesOptions>& AlignCollectivesOptions::Schema() {
  static const auto* schema = new OptionSchema<AlignCollectivesOptions>({
      Field("max_nodes", &AlignCollectivesOptions::max_nodes, Integer(0)),
  });
  return *schema;
}

absl::StatusOr<bool> AlignCollectivesPass::RunOnGraph(Graph& graph) {
  return AlignCollectives(graph, options_.max_nodes) > 0;
}

MAGI_REGISTER_PASS(AlignCollectivesPass);

}  // namespace magi
