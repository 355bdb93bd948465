#include "magi/passes/reshard_after_forward.h"

#include <functional>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"
#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/phase_util.h"
#include "magi/passes/schedule_util.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// The wait of a backward all-gather of exactly `start`'s shards (in the same dtypes, each
// possibly through a cast of its own: GatheredShard), or null.
Node* ExistingRegather(const Graph& graph, const Node& start) {
  for (Node* node : graph.nodes()) {
    if (node->op() != kAllGatherStartOp || node->annotations().phase != Phase::kBackward) continue;
    if (node->num_operands() != start.num_operands()) continue;
    bool same = true;
    for (int i = 0; i < start.num_operands(); ++i) {
      same &= GatheredShard(node->operand(i)) == GatheredShard(start.operand(i)) &&
              node->operand(i)->type().tensor().dtype == start.operand(i)->type().tensor().dtype;
    }
    if (same) return WaitOfStart(*node);
  }
  return nullptr;
}

// The operands a new backward gather of `start`'s shards reads: the shards themselves, or
// fresh casts of them inserted before `before`, so that the forward casts can die after
// forward (gathering the forward casts again would keep them alive into backward).
std::vector<Value*> RegatherOperands(Graph& graph, const Node& start, Node* before) {
  std::vector<Value*> operands;
  for (Value* operand : start.operands()) {
    const Value* shard = GatheredShard(operand);
    if (shard == operand) {
      operands.push_back(operand);
      continue;
    }
    absl::flat_hash_map<const Value*, Value*> map;
    map[shard] = const_cast<Value*>(shard);
    Node* cast = CopyNode(*operand->producer(), graph, map, before);
    cast->mutable_annotations().phase = Phase::kBackward;
    operands.push_back(cast->result(0));
  }
  return operands;
}

// A set of FSDP groups by module path: "layers.0+root" ("" is the root group).
OptionCodec<std::set<std::string>> ModulePaths() {
  OptionCodec<std::set<std::string>> codec;
  codec.syntax = "a+b+root";
  codec.expected = "module paths joined by + (root for the root group)";
  codec.parse = [](absl::string_view text, std::set<std::string>& value) {
    std::set<std::string> paths;
    for (absl::string_view path : absl::StrSplit(text, '+')) {
      if (path.empty()) return false;
      paths.insert(path == "root" ? "" : std::string(path));
    }
    value = std::move(paths);
    return true;
  };
  codec.print = [](const std::set<std::string>& value) {
    return absl::StrJoin(value, "+", [](std::string* out, const std::string& path) {
      out->append(path.empty() ? "root" : path);
    });
  };
  return codec;
}

}  // namespace

bool ReshardAfterForward::Selected(const Node& start) const {
  const std::string& group = start.annotations().module_path;
  return (options_.groups.empty() || options_.groups.count(group) > 0) && options_.except.count(group) == 0;
}

bool ReshardAfterForward::Keep(Graph& graph) const {
  absl::flat_hash_map<Value*, Value*> regathers = BackwardRegathers(graph);
  absl::flat_hash_map<const Value*, Value*> forward_of_backward;
  for (const auto& [forward, backward] : regathers) forward_of_backward[backward] = forward;
  // Collect first: the loop erases waits that come later in program order.
  std::vector<Node*> starts;
  for (Node* node : graph.nodes()) {
    if (node->op() == kAllGatherStartOp && node->annotations().phase == Phase::kBackward && Selected(*node)) {
      starts.push_back(node);
    }
  }
  bool changed = false;
  for (Node* start : starts) {
    Node* wait = WaitOfStart(*start);
    if (wait == nullptr) continue;
    bool all_gathered_before = true;
    for (const Value* result : wait->results()) all_gathered_before &= forward_of_backward.contains(result);
    if (!all_gathered_before) continue;
    for (Value* result : wait->results()) graph.ReplaceAllUsesWith(result, forward_of_backward.at(result));
    std::vector<Value*> operands(start->operands().begin(), start->operands().end());
    graph.EraseNode(wait);
    graph.EraseNode(start);
    // Pieces kept for this gather (reshard_after_forward=<int>) are dead now.
    for (Value* operand : operands) {
      Node* producer = operand->producer();
      if (producer != nullptr && producer->op() == kLocalShardOp && operand->uses().empty()) graph.EraseNode(producer);
    }
    changed = true;
  }
  return changed;
}

bool ReshardAfterForward::Reshard(Graph& graph) const {
  int boundary = BackwardBoundary(graph);
  if (boundary < 0) return false;
  // Nodes before the backward boundary; everything else, and every node added here, is late.
  absl::flat_hash_set<const Node*> early;
  std::vector<Node*> nodes = graph.nodes();
  for (int i = 0; i < boundary; ++i) early.insert(nodes[i]);
  bool changed = false;
  for (Node* start : nodes) {
    if (start->op() != kAllGatherStartOp || start->annotations().phase == Phase::kBackward || !Selected(*start)) {
      continue;
    }
    Node* wait = WaitOfStart(*start);
    if (wait == nullptr || !early.contains(wait)) continue;
    // Backward users of the results, directly or through forward views of them.
    std::vector<Node*> late_users;
    std::function<void(const Value*)> find_late = [&](const Value* value) {
      for (Node* user : value->Users()) {
        if (!early.contains(user)) {
          late_users.push_back(user);
        } else if (IsViewOp(user->op())) {
          for (const Value* view : user->results()) find_late(view);
        }
      }
    };
    for (const Value* result : wait->results()) find_late(result);
    if (late_users.empty()) continue;  // the common case: positions are not needed
    absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
    Node* first_late_user = nullptr;
    for (Node* user : late_users) {
      if (first_late_user == nullptr || positions.at(user) < positions.at(first_late_user)) first_late_user = user;
    }

    Node* regather_wait = ExistingRegather(graph, *start);
    if (regather_wait != nullptr) {
      // Backward already gathers these shards, but too late for some backward use of a
      // forward view: move that gather up instead of adding one.
      Node* regather = const_cast<Node*>(StartOfWait(*regather_wait));
      if (positions.at(regather_wait) > positions.at(first_late_user)) {
        if (!HoistBefore(graph, regather, first_late_user)) continue;
        graph.MoveBefore(regather_wait, first_late_user);
      }
    } else {
      const ProcessGroup* group =
          graph.module() == nullptr ? nullptr : graph.module()->FindProcessGroup(StringArg(*start, "group"));
      if (group == nullptr) continue;
      std::vector<Value*> shards = RegatherOperands(graph, *start, first_late_user);
      absl::StatusOr<Node*> regather =
          AddCollectiveStart(graph, CollectiveKind::kAllGather, shards, *group, "sum", first_late_user);
      if (!regather.ok()) continue;
      regather_wait = AddWait(graph, *regather, first_late_user);
      for (Node* node : {*regather, regather_wait}) {
        node->mutable_annotations() = start->annotations();
        node->mutable_annotations().phase = Phase::kBackward;
        node->mutable_annotations().bucket = -1;
        node->mutable_annotations().schedule = -1;
      }
    }
    // Whether backward reads `value`, directly or through forward views of it (a slice of
    // a padded gather, then its transpose).
    std::function<bool(const Value*)> read_late = [&](const Value* value) {
      for (Node* user : value->Users()) {
        if (!early.contains(user)) return true;
        if (IsViewOp(user->op())) {
          for (const Value* view : user->results()) {
            if (read_late(view)) return true;
          }
        }
      }
      return false;
    };
    // Point backward uses at the regathered values, copying forward views as needed.
    std::function<void(Value*, Value*)> redirect = [&](Value* value, Value* replacement) {
      for (Node* user : value->Users()) {
        if (!early.contains(user)) {
          if (user == regather_wait || user == StartOfWait(*regather_wait)) continue;
          for (int i = 0; i < user->num_operands(); ++i) {
            if (user->operand(i) == value) user->ReplaceOperand(i, replacement);
          }
        } else if (IsViewOp(user->op()) && user->operand(0) == value) {
          bool has_late_use = false;
          for (const Value* view : user->results()) has_late_use |= read_late(view);
          if (!has_late_use) continue;
          absl::flat_hash_map<const Value*, Value*> map;
          for (Value* operand : user->operands()) map[operand] = operand;
          map[value] = replacement;
          Node* copy = CopyNode(*user, graph, map, first_late_user);
          copy->mutable_annotations().phase = Phase::kBackward;
          for (int i = 0; i < user->num_results(); ++i) redirect(user->result(i), copy->result(i));
        }
      }
    };
    for (int i = 0; i < wait->num_results(); ++i) redirect(wait->result(i), regather_wait->result(i));
    changed = true;
  }
  return changed;
}

absl::StatusOr<bool> ReshardAfterForward::RunOnGraph(Graph& graph) {
  return options_.reshard ? Reshard(graph) : Keep(graph);
}

const OptionSchema<ReshardAfterForwardOptions>& ReshardAfterForwardOptions::Schema() {
  static const auto* schema = new OptionSchema<ReshardAfterForwardOptions>({
      Field("mode", &ReshardAfterForwardOptions::reshard, Choice<bool>({{"keep", false}, {"reshard", true}}),
            kAlwaysPrinted),
      Field("groups", &ReshardAfterForwardOptions::groups, ModulePaths()),
      Field("except", &ReshardAfterForwardOptions::except, ModulePaths()),
  });
  return *schema;
}

MAGI_REGISTER_PASS(ReshardAfterForward);

}  // namespace magi
