#include "magi/passes/auto_recompute.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/numbers.h"
#include "magi/ir/graph_utils.h"
#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/phase_util.h"
#include "magi/passes/recompute_probe.h"
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
std::vector<Node*> RankCandidates(const Graph& graph, const std::vector<Node*>& order, int boundary,
                                  const NodeCostOracle& model) {
  absl::flat_hash_map<const Node*, int> positions;
  positions.reserve(order.size());
  for (int i = 0; i < static_cast<int>(order.size()); ++i) positions[order[i]] = i;
  struct Ranked {
    Node* node;
    double score;
    int position;
  };
  std::vector<Ranked> ranked;
  for (Node* node : order) {
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

}  // namespace

void UndoRecompute(Graph& graph, RecomputeUndo& undo) {
  for (auto it = undo.uses.rbegin(); it != undo.uses.rend(); ++it) std::get<0>(*it)->ReplaceOperand(std::get<1>(*it), std::get<2>(*it));
  for (auto it = undo.copies.rbegin(); it != undo.copies.rend(); ++it) graph.EraseNode(*it);
  for (auto it = undo.remat.rbegin(); it != undo.remat.rend(); ++it) it->first->mutable_annotations().remat = it->second;
  undo = RecomputeUndo();
}

std::vector<Node*> RecomputeForBackward(Graph& graph, const std::vector<Node*>& chosen, RecomputeUndo* undo) {
  if (chosen.empty()) return {};
  std::vector<Node*> nodes = graph.nodes();
  int boundary = BackwardBoundary(nodes);
  if (boundary < 0) return {};
  absl::flat_hash_map<const Node*, int> positions;
  positions.reserve(nodes.size());
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) positions[nodes[i]] = i;
  absl::flat_hash_set<const Node*> recompute(chosen.begin(), chosen.end());
  // Views of recomputed values are recomputed with them (else they would keep the base alive).
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
  absl::flat_hash_map<Value*, Value*> regathers = BackwardRegathers(nodes);
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

absl::StatusOr<bool> AutoRecompute::RunOnGraph(Graph& graph) {
  const std::vector<Node*> nodes = graph.nodes();
  absl::StatusOr<MemoryPlan> before = PlanMemory(graph, nodes, /*assign_buffers=*/false);
  if (!before.ok()) return before.status();
  report_.peak_before = before->peak_bytes;
  report_.peak_after = before->peak_bytes;
  if (before->peak_bytes <= options_.budget_bytes) return false;
  int boundary = BackwardBoundary(nodes);
  if (boundary < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "auto-recompute: graph @%s peaks at %d bytes, over the budget of %d, and has no backward to trade against",
        graph.name(), before->peak_bytes, options_.budget_bytes));
  }
  std::vector<Node*> candidates = RankCandidates(graph, nodes, boundary, *model_);
  report_.candidates = static_cast<int>(candidates.size());
  const int n = static_cast<int>(candidates.size());
  // Peaks of prefixes from the probe (no rewrite); the chosen rewrite is checked for real below.
  absl::StatusOr<RecomputePeakProbe> probe = RecomputePeakProbe::Build(graph, nodes);
  if (!probe.ok()) return probe.status();
  auto prefix = [&](int count) { return std::vector<Node*>(candidates.begin(), candidates.begin() + count); };
  const int64_t all = n == 0 ? before->peak_bytes : probe->Peak(prefix(n));
  // Recomputing everything is not always the least memory (each copy keeps its inputs
  // until backward needs it): when all of them do not fit, halving prefixes are tried.
  int high = all <= options_.budget_bytes ? n : 0;
  int64_t floor = all;
  for (int count = n / 2; high == 0 && count >= 1; count /= 2) {
    int64_t peak = probe->Peak(prefix(count));
    floor = std::min(floor, peak);
    if (peak <= options_.budget_bytes) high = count;
  }
  report_.peak_floor = floor;
  if (high == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "auto-recompute: graph @%s cannot fit %d bytes: it peaks at %d, at %d with all %d recomputable "
        "activations recomputed, and at %d at best",
        graph.name(), options_.budget_bytes, before->peak_bytes, all, n, floor));
  }
  // Smallest prefix that fits (the peak falls as the prefix grows, up to the planner's
  // exact accounting; the final rewrite is checked below).
  int low = 1;
  while (low < high) {
    int mid = low + (high - low) / 2;
    if (probe->Peak(prefix(mid)) <= options_.budget_bytes) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  for (Node* node : candidates) {
    if (undo_ != nullptr) undo_->remat.emplace_back(node, node->annotations().remat);
    node->mutable_annotations().remat = RematDecision::kSave;
  }
  // The probe is exact (recompute_probe_test); should a rewrite ever plan higher than it
  // predicted, it is taken back and a longer prefix tried, so the budget holds anyway.
  std::vector<Node*> copies;
  absl::StatusOr<MemoryPlan> after;
  while (true) {
    RecomputeUndo rewrite;
    copies = RecomputeForBackward(graph, prefix(low), &rewrite);
    after = PlanMemory(graph, /*assign_buffers=*/false);
    if (!after.ok()) return after.status();
    if (after->peak_bytes <= options_.budget_bytes || low >= n) {
      if (undo_ != nullptr) {
        undo_->copies.insert(undo_->copies.end(), rewrite.copies.begin(), rewrite.copies.end());
        undo_->uses.insert(undo_->uses.end(), rewrite.uses.begin(), rewrite.uses.end());
        undo_->remat.insert(undo_->remat.end(), rewrite.remat.begin(), rewrite.remat.end());
      }
      break;
    }
    UndoRecompute(graph, rewrite);
    ++low;
  }
  report_.peak_after = after->peak_bytes;
  report_.recomputed = static_cast<int>(copies.size());
  for (const Node* copy : copies) report_.recompute_seconds += model_->NodeSeconds(*copy);
  if (after->peak_bytes > options_.budget_bytes) {
    return absl::InternalError(absl::StrFormat("auto-recompute: the chosen rewrite peaks at %d bytes, over %d",
                                               after->peak_bytes, options_.budget_bytes));
  }
  return true;
}

namespace {

// A budget in megabytes (`scale` 1e6) or gigabytes (1e9), held in bytes (rounded down).
OptionCodec<int64_t> BudgetIn(double scale) {
  OptionCodec<int64_t> codec;
  codec.syntax = "X";
  codec.expected = absl::StrCat("a positive, finite number of ", scale == 1e6 ? "megabytes" : "gigabytes",
                                " (below 2^63 bytes)");
  codec.parse = [scale](absl::string_view text, int64_t& value) {
    double number = 0;
    if (!ParseFiniteDouble(text, &number) || number <= 0) return false;
    std::optional<int64_t> bytes = BytesFromDouble(number * scale);
    if (!bytes) return false;
    value = *bytes;
    return true;
  };
  codec.print = [](const int64_t& bytes) { return absl::StrFormat("%.6f", bytes / 1e6); };
  return codec;
}

}  // namespace

AutoRecomputeOptions AutoRecomputeOptions::Budget(int64_t bytes, std::string profile) {
  AutoRecomputeOptions options;
  options.budget_bytes = bytes;
  options.profile = std::move(profile);
  return options;
}

const OptionSchema<AutoRecomputeOptions>& AutoRecomputeOptions::Schema() {
  static const auto* schema = new OptionSchema<AutoRecomputeOptions>(
      {
          Field("budget_mb", &AutoRecomputeOptions::budget_bytes, BudgetIn(1e6)),
          Field("budget_gb", &AutoRecomputeOptions::budget_bytes, BudgetIn(1e9), kParseOnly),
          Field("profile", &AutoRecomputeOptions::profile, Text()),
      },
      [](const AutoRecomputeOptions& options) {
        return options.budget_bytes > 0 ? absl::OkStatus()
                                        : absl::InvalidArgumentError("needs budget_mb=N or budget_gb=X");
      });
  return *schema;
}

}  // namespace magi
