#include "magi/passes/elide_single_rank_collectives.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "magi/ir/collectives.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// The size of the process group a collective start names, or 0 when it names none.
int64_t GroupSize(const Graph& graph, const Node& start) {
  const Attribute* group = start.FindArg("group");
  if (group == nullptr || group->kind() != AttrKind::kString || graph.module() == nullptr) return 0;
  const ProcessGroup* found = graph.module()->FindProcessGroup(group->as_string());
  return found == nullptr ? 0 : found->size;
}

// Whether every result of `wait` can be replaced by the start's input of the same index.
bool IsIdentity(const Graph& graph, const Node& start, const Node& wait) {
  if (wait.num_results() != start.num_operands()) return false;
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph.outputs()) outputs.insert(output.value);
  for (int i = 0; i < wait.num_results(); ++i) {
    const Value* input = start.operand(i);
    const Value* result = wait.result(i);
    if (!(input->type() == result->type())) return false;
    if (outputs.contains(result) && input->is_graph_input()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> ElideSingleRankCollectives::RunOnGraph(Graph& graph) {
  // The starts first: eliding one erases its wait, which a walk over graph.nodes() would reach.
  std::vector<Node*> starts;
  for (Node* node : graph.nodes()) {
    if (IsCollectiveStart(node->op()) && GroupSize(graph, *node) == 1) starts.push_back(node);
  }
  bool changed = false;
  for (Node* start : starts) {
    Node* wait = WaitOfStart(*start);
    if (wait == nullptr || !IsIdentity(graph, *start, *wait)) continue;
    for (int i = 0; i < wait->num_results(); ++i) graph.ReplaceAllUsesWith(wait->result(i), start->operand(i));
    graph.EraseNode(wait);
    graph.EraseNode(start);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(ElideSingleRankCollectives);

}  // namespace magi
