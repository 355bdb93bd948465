#include "magi/passes/recompute_fusible.h"

#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/phase_util.h"
#include "magi/passes/schedule_util.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// Reductions a fusing backend folds an elementwise producer into.
bool IsSumOrMean(absl::string_view op) {
  return absl::StartsWith(op, "aten::sum") || absl::StartsWith(op, "aten::mean");
}

// The readers of `value` and of the views of it (transitively), views themselves left out;
// the views go to `views` when given.
void ReadersThroughViews(const Value* value, std::vector<const Node*>& readers,
                         std::vector<const Value*>* views = nullptr) {
  for (const Node* user : value->Users()) {
    if (IsViewOp(user->op())) {
      for (const Value* view : user->results()) {
        if (views != nullptr) views->push_back(view);
        ReadersThroughViews(view, readers, views);
      }
    } else {
      readers.push_back(user);
    }
  }
}

}  // namespace

std::vector<Node*> ChooseFusibleRecompute(const Graph& graph, const DeclinedByBackend& declined) {
  std::vector<Node*> nodes = graph.nodes();
  const int boundary = BackwardBoundary(nodes);
  if (boundary < 0) return {};
  absl::flat_hash_map<const Node*, int> position;
  position.reserve(nodes.size());
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) position[nodes[i]] = i;
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph.outputs()) outputs.insert(output.value);
  auto accepted = [&](const Node& node) { return declined == nullptr || !declined(node); };
  // Whether the backward reads `value` itself (or a view of it): saved regardless.
  auto read_in_backward = [&](const Value* value) {
    std::vector<const Node*> readers;
    ReadersThroughViews(value, readers);
    for (const Node* reader : readers) {
      if (position.at(reader) >= boundary) return true;
    }
    return false;
  };

  std::vector<Node*> chosen;
  for (int i = 0; i < boundary; ++i) {
    Node* node = nodes[i];
    const OpTraits traits = GetOpTraits(node->op());
    if (!traits.elementwise || traits.view || !IsMovable(*node) || node->num_results() == 0 || !accepted(*node)) {
      continue;
    }
    bool eligible = true, backward_reads = false;
    for (const Value* result : node->results()) {
      eligible &= result->type().is_tensor() && !outputs.contains(result);
      if (!eligible) break;
      std::vector<const Node*> readers;
      std::vector<const Value*> views;
      ReadersThroughViews(result, readers, &views);
      // A view that leaves the graph keeps the forward value alive anyway.
      for (const Value* view : views) eligible &= !outputs.contains(view);
      for (const Node* reader : readers) {
        const bool backward = position.at(reader) >= boundary;
        backward_reads |= backward;
        const OpTraits reader_traits = GetOpTraits(reader->op());
        const bool fuses = reader_traits.elementwise || (backward && IsSumOrMean(reader->op()));
        eligible &= fuses && !reader_traits.view && accepted(*reader);
      }
    }
    if (!eligible || !backward_reads) continue;
    for (const Value* operand : node->operands()) {
      if (!operand->type().is_tensor()) continue;
      const TensorType& type = operand->type().tensor();
      const bool scalar = type.sizes.empty();
      eligible &= scalar || operand->is_graph_input() || read_in_backward(operand);
    }
    if (eligible) chosen.push_back(node);
  }
  return chosen;
}

int RecomputeFusible(Graph& graph, const DeclinedByBackend& declined, RecomputeUndo* undo) {
  std::vector<Node*> chosen = ChooseFusibleRecompute(graph, declined);
  RecomputeForBackward(graph, chosen, undo);
  return static_cast<int>(chosen.size());
}

absl::StatusOr<bool> RecomputeFusiblePass::RunOnGraph(Graph& graph) { return RecomputeFusible(graph) > 0; }

MAGI_REGISTER_PASS(RecomputeFusiblePass);

}  // namespace magi
