#include "magi/passes/hoist_weight_preparation.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// The inputs of `graph` that are weights: param or buffer inputs the step never replaces.
absl::flat_hash_set<const Value*> FixedWeights(const Graph& graph) {
  absl::flat_hash_set<std::string> replaced;
  absl::flat_hash_set<const Value*> aliased;
  for (const GraphOutput& output : graph.outputs()) {
    replaced.insert(output.name);
    if (output.aliases != nullptr) aliased.insert(output.aliases);
  }
  absl::flat_hash_set<const Value*> fixed;
  for (Value* input : graph.inputs()) {
    if (input->role() != InputRole::kParam && input->role() != InputRole::kBuffer) continue;
    if (aliased.contains(input) || replaced.contains(input->name()) ||
        replaced.contains(absl::StrCat(input->name(), ".updated"))) {
      continue;
    }
    fixed.insert(input);
  }
  return fixed;
}

bool Hoistable(const Node& node) {
  const OpTraits traits = GetOpTraits(node.op());
  return node.num_operands() > 0 && traits.movable() && !traits.data_dependent && !traits.uninitialized &&
         node.op() != kCallOp;
}

}  // namespace

std::string WeightPreparationGraphName(const std::string& graph_name) { return graph_name + ".prep"; }

absl::StatusOr<std::string> HoistWeightPreparation(Module& module, const std::string& graph_name) {
  Graph* graph = module.FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("module @", module.name(), " has no graph @", graph_name));
  const std::string prep_name = WeightPreparationGraphName(graph_name);
  if (module.FindGraph(prep_name) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("module @", module.name(), " already has a graph @", prep_name));
  }
  const absl::flat_hash_set<const Value*> fixed = FixedWeights(*graph);
  // Everything computable from the weights alone, in program order.
  std::vector<Node*> order = graph->nodes();
  absl::flat_hash_set<const Node*> hoisted;
  for (Node* node : order) {
    if (!Hoistable(*node)) continue;
    bool from_weights = true;
    for (const Value* operand : node->operands()) {
      from_weights &= operand->is_graph_input() ? fixed.contains(operand) : hoisted.contains(operand->producer());
    }
    if (from_weights) hoisted.insert(node);
  }
  // Views the step reads stay there (last to first, so a chain of them stays whole).
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph->outputs()) outputs.insert(output.value);
  auto read_by_step = [&](const Value* value) {
    if (outputs.contains(value)) return true;
    for (const Use& use : value->uses()) {
      if (!hoisted.contains(use.user)) return true;
    }
    return false;
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    if (!hoisted.contains(node) || !IsViewOp(node->op())) continue;
    bool read = false;
    for (const Value* result : node->results()) read |= read_by_step(result);
    if (read) hoisted.erase(node);
  }
  // Nothing but views (or nothing): no work to save.
  bool computes = false;
  for (const Node* node : hoisted) computes |= !IsViewOp(node->op());
  if (!computes) return std::string();

  Graph* prep = module.AddGraph(prep_name);
  absl::flat_hash_map<const Value*, Value*> value_map;
  std::vector<Value*> prepared;  // values of the step that become its inputs
  for (Node* node : order) {
    if (!hoisted.contains(node)) continue;
    for (Value* operand : node->operands()) {
      if (operand->is_graph_input() && !value_map.contains(operand)) {
        value_map[operand] = prep->AddInput(operand->name(), operand->type(), operand->role());
      }
    }
    CopyNode(*node, *prep, value_map);
    for (Value* result : node->results()) {
      if (read_by_step(result)) prepared.push_back(result);
    }
  }
  for (Value* value : prepared) prep->AddOutput(value->name(), value_map.at(value));

  // The step reads the prepared values as inputs of their names.
  std::vector<Value*> placeholders;
  for (Value* value : prepared) {
    Value* placeholder = graph->AddInput(graph->FreshName("prepared."), value->type(), InputRole::kParam);
    graph->ReplaceAllUsesWith(value, placeholder);
    placeholders.push_back(placeholder);
  }
  absl::flat_hash_set<Value*> read_before;
  for (Value* input : graph->inputs()) {
    if (input->has_uses()) read_before.insert(input);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (hoisted.contains(*it)) graph->EraseNode(*it);
  }
  for (size_t i = 0; i < prepared.size(); ++i) {
    const std::string& name = prep->outputs()[i].name;
    Value* input = graph->AddInput(name, placeholders[i]->type(), InputRole::kParam);
    graph->ReplaceAllUsesWith(placeholders[i], input);
    graph->EraseInput(placeholders[i]);
  }
  // Weights only the preparation reads now.
  std::vector<Value*> unread;
  for (Value* input : graph->inputs()) {
    if (read_before.contains(input) && !input->has_uses() && !outputs.contains(input) && fixed.contains(input)) {
      unread.push_back(input);
    }
  }
  for (Value* input : unread) graph->EraseInput(input);
  return prep_name;
}

absl::StatusOr<bool> HoistWeightPreparationPass::RunImpl(Module& module) {
  absl::flat_hash_set<std::string> callees;
  for (const Graph* graph : module.graphs()) {
    for (const Node* node : graph->nodes()) {
      if (node->op() == kCallOp) callees.insert(CalleeName(*node));
    }
  }
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    if (callees.contains(graph->name()) || absl::EndsWith(graph->name(), ".prep") ||
        module.FindGraph(WeightPreparationGraphName(graph->name())) != nullptr) {
      continue;
    }
    absl::StatusOr<std::string> prep = HoistWeightPreparation(module, graph->name());
    if (!prep.ok()) return prep.status();
    changed |= !prep->empty();
  }
  return changed;
}

MAGI_REGISTER_PASS(HoistWeightPreparationPass);

}  // namespace magi
