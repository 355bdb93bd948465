#include "magi/passes/auto_recompute.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/ir/graph_utils.h"
#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/phase_util.h"
#include "magi/passes/schedule_util.h"

namespace magi {
namespace {

bool IsOutput(const Graph& graph, const Value* value) {
  for (const GraphOutput& output : graph.outputs()) {
    if (output.value == value) return true;
  }
  return false;
}

// Forward nodes whose results backward reads and that may be recomputed, best first.
std::vector<Node*> RankCandidates(const Graph& graph, int boundary, const NodeCostOracle& model) {
  absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
  struct Ranked {
    Node* node;
    double score;
    int position;
  };
  std::vector<Ranked> ranked;
  for (Node* node : graph.nodes()) {
    int position = positions.at(node);
    if (position >= boundary) break;
    if (!IsMovable(*node) || IsViewOp(node->op()) || node->num_results() == 0) continue;
    bool eligible = true, used_late = false;
    double bytes = 0;
    for (const Value* operand : node->operands()) eligible &= operand->type().is_tensor();
    for (const Value* result : node->results()) {
      eligible &= result->type().is_tensor() && !IsOutput(graph, result);
      bytes += static_cast<double>(ValueBytes(*result));
      for (const Node* user : result->Users()) used_late |= positions.at(user) >= boundary;
    }
    // Views of the results that backward reads keep them alive too.
    std::function<void(const Value*)> late_through_views = [&](const Value* value) {
      for (const Node* user : value->Users()) {
        if (IsViewOp(user->op()) && positions.at(user) < boundary) {
          for (const Value* view : user->results()) {
            for (const Node* view_user : view->Users()) used_late |= positions.at(view_user) >= boundary;
            late_through_views(view);
          }
        }
      }
    };
    for (const Value* result : node->results()) late_through_views(result);
    if (!eligible || !used_late || bytes == 0) continue;
    double seconds = model.NodeSeconds(*node);
    ranked.push_back({node, bytes / std::max(seconds, 1e-12), position});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return a.score != b.score ? a.score > b.score : a.position < b.position;
  });
  std::vector<Node*> nodes;
  for (const Ranked& r : ranked) nodes.push_back(r.node);
  return nodes;
}

// The peak after recomputing the first `count` candidates: the rewrite is made in place,
// planned and taken back (cheaper than rewriting a copy of the module: no clone).
absl::StatusOr<int64_t> ProbePeak(Graph& graph, const std::vector<Node*>& candidates, int count) {
  RecomputeUndo undo;
  RecomputeForBackward(graph, std::vector<Node*>(candidates.begin(), candidates.begin() + count), &undo);
  absl::StatusOr<MemoryPlan> plan = PlanMemory(graph, /*assign_buffers=*/false);
  UndoRecompute(graph, undo);
  if (!plan.ok()) return plan.status();
  return plan->peak_bytes;
}

}  // namespace

void UndoRecompute(Graph& graph, RecomputeUndo& undo) {
  for (auto it = undo.uses.rbegin(); it != undo.uses.rend(); ++it) std::get<0>(*it)->ReplaceOperand(std::get<1>(*it), std::get<2>(*it));
  for (auto it = undo.copies.rbegin(); it != undo.copies.rend(); ++it) graph.EraseNode(*it);
  for (auto it = undo.remat.rbegin(); it != undo.remat.rend(); ++it) it->first->mutable_annotations().remat = it->second;
  undo = RecomputeUndo();
}

std::vector<Node*> RecomputeForBackward(Graph& graph, const std::vector<Node*>& chosen, RecomputeUndo* undo) {
  int boundary = BackwardBoundary(graph);
  if (boundary < 0 || chosen.empty()) return {};
  absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
  absl::flat_hash_set<const Node*> recompute(chosen.begin(), chosen.end());
  // Views of recomputed values are recomputed with them (else they would keep the base alive).
  std::vector<Node*> nodes = graph.nodes();
  for (int i = 0; i < boundary; ++i) {
    Node* node = nodes[i];
    if (IsViewOp(node->op()) && node->num_operands() > 0 && node->operand(0)->producer() != nullptr &&
        recompute.contains(node->operand(0)->producer())) {
      recompute.insert(node);
    }
  }
  for (Node* node : nodes) {
    if (!recompute.contains(node)) continue;
    if (undo != nullptr) undo->remat.emplace_back(node, node->annotations().remat);
    node->mutable_annotations().remat = RematDecision::kRecompute;
  }
  absl::flat_hash_map<Value*, Value*> regathers = BackwardRegathers(graph);
  absl::flat_hash_map<const Value*, Value*> copy_of;
  std::vector<Node*> copies;
  // Makes (once) the copy of `value` for backward, inserted before `before`.
  std::function<Value*(Value*, Node*)> materialize = [&](Value* value, Node* before) -> Value* {
    auto found = copy_of.find(value);
    if (found != copy_of.end()) return found->second;
    Node* producer = value->producer();
    absl::flat_hash_map<const Value*, Value*> map;
    for (Value* operand : producer->operands()) {
      if (operand->producer() != nullptr && recompute.contains(operand->producer())) {
        map[operand] = materialize(operand, before);
        continue;
      }
      auto regathered = regathers.find(operand);
      map[operand] =
          regathered != regathers.end() && positions.at(regathered->second->producer()) < positions.at(before)
              ? regathered->second
              : operand;
    }
    Node* copy = CopyNode(*producer, graph, map, before);
    copy->mutable_annotations().phase = Phase::kBackward;
    copy->mutable_annotations().remat = RematDecision::kRecompute;
    copy->mutable_annotations().schedule = -1;
    copies.push_back(copy);
    if (undo != nullptr) undo->copies.push_back(copy);
    for (int i = 0; i < producer->num_results(); ++i) copy_of[producer->result(i)] = copy->result(i);
    return copy_of.at(value);
  };
  for (size_t i = boundary; i < nodes.size(); ++i) {
    Node* user = nodes[i];
    for (int k = 0; k < user->num_operands(); ++k) {
      Value* operand = user->operand(k);
      if (operand->producer() == nullptr || !recompute.contains(operand->producer())) continue;
      // Positions of nodes copied in before `user` are not needed: copies only read
      // values made before the boundary or other copies.
      Value* copy = materialize(operand, user);
      if (undo != nullptr) undo->uses.emplace_back(user, k, operand);
      user->ReplaceOperand(k, copy);
    }
  }
  return copies;
}

absl::StatusOr<bool> AutoRecompute::RunOnGraph(Module& module, Graph& graph) {
  absl::StatusOr<MemoryPlan> before = PlanMemory(graph, /*assign_buffers=*/false);
  if (!before.ok()) return before.status();
  report_.peak_before = before->peak_bytes;
  report_.peak_after = before->peak_bytes;
  if (before->peak_bytes <= budget_bytes_) return false;
  int boundary = BackwardBoundary(graph);
  if (boundary < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "auto-recompute: graph @%s peaks at %d bytes, over the budget of %d, and has no backward to trade against",
        graph.name(), before->peak_bytes, budget_bytes_));
  }
  std::vector<Node*> candidates = RankCandidates(graph, boundary, *model_);
  report_.candidates = static_cast<int>(candidates.size());
  const int n = static_cast<int>(candidates.size());
  absl::StatusOr<int64_t> all = n == 0 ? absl::StatusOr<int64_t>(before->peak_bytes) : ProbePeak(graph, candidates, n);
  if (!all.ok()) return all.status();
  report_.peak_floor = *all;
  if (*all > budget_bytes_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "auto-recompute: graph @%s cannot fit %d bytes: it peaks at %d, and at %d with all %d recomputable "
        "activations recomputed",
        graph.name(), budget_bytes_, before->peak_bytes, *all, n));
  }
  // Smallest prefix that fits (the peak falls as the prefix grows, up to the planner's
  // exact accounting; the final rewrite is checked below).
  int low = 1, high = n;
  while (low < high) {
    int mid = low + (high - low) / 2;
    absl::StatusOr<int64_t> peak = ProbePeak(graph, candidates, mid);
    if (!peak.ok()) return peak.status();
    if (*peak <= budget_bytes_) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  std::vector<Node*> chosen(candidates.begin(), candidates.begin() + low);
  for (Node* node : candidates) {
    if (undo_ != nullptr) undo_->remat.emplace_back(node, node->annotations().remat);
    node->mutable_annotations().remat = RematDecision::kSave;
  }
  std::vector<Node*> copies = RecomputeForBackward(graph, chosen, undo_);
  absl::StatusOr<MemoryPlan> after = PlanMemory(graph, /*assign_buffers=*/false);
  if (!after.ok()) return after.status();
  report_.peak_after = after->peak_bytes;
  report_.recomputed = static_cast<int>(copies.size());
  for (const Node* copy : copies) report_.recompute_seconds += model_->NodeSeconds(*copy);
  if (after->peak_bytes > budget_bytes_) {
    return absl::InternalError(absl::StrFormat("auto-recompute: the chosen rewrite peaks at %d bytes, over %d",
                                               after->peak_bytes, budget_bytes_));
  }
  return true;
}

absl::StatusOr<bool> AutoRecompute::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    absl::StatusOr<bool> graph_changed = RunOnGraph(module, *graph);
    if (!graph_changed.ok()) return graph_changed.status();
    changed |= *graph_changed;
  }
  return changed;
}

}  // namespace magi
