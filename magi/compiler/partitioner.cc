#include "magi/compiler/partitioner.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

bool Outlinable(const Node& node, const Capability& capability) {
  if (IsCommunication(node.op()) || node.op() == kCallOp) return false;
  return capability.Supports(&node);
}

// Moves `run` (consecutive nodes of `graph`) into a new graph `callee_name` of `module`
// and puts one magi::call in its place.
absl::Status Outline(Module& module, Graph& graph, const std::vector<Node*>& run, const std::string& callee_name) {
  absl::flat_hash_set<const Node*> in_run(run.begin(), run.end());
  std::vector<Value*> inputs;
  absl::flat_hash_set<const Value*> seen;
  for (const Node* node : run) {
    for (Value* operand : node->operands()) {
      if ((operand->producer() == nullptr || !in_run.contains(operand->producer())) && seen.insert(operand).second) {
        inputs.push_back(operand);
      }
    }
  }
  absl::flat_hash_set<const Value*> returned;
  // A graph output written over the donated input it aliases by a node of the run that
  // reads that input (the partition backend took it: Backend::UpdatesDonatedInputInPlace):
  // the partition's output aliases its own input for it.
  absl::flat_hash_map<const Value*, const Value*> updates;
  for (const GraphOutput& output : graph.outputs()) {
    returned.insert(output.value);
    const Node* producer = output.value->producer();
    if (output.aliases == nullptr || producer == nullptr || !in_run.contains(producer)) continue;
    for (const Value* operand : producer->operands()) {
      if (operand == output.aliases) updates[output.value] = output.aliases;
    }
  }
  std::vector<Value*> outputs;
  for (const Node* node : run) {
    for (Value* result : node->results()) {
      bool used_outside = returned.contains(result);
      for (const Use& use : result->uses()) used_outside = used_outside || !in_run.contains(use.user);
      if (used_outside) outputs.push_back(result);
    }
  }

  Graph* callee = module.AddGraph(callee_name);
  absl::flat_hash_map<const Value*, Value*> value_map;
  for (Value* input : inputs) value_map[input] = callee->AddInput(input->name(), input->type(), input->role());
  for (const Node* node : run) CopyNode(*node, *callee, value_map);
  for (Value* output : outputs) {
    auto update = updates.find(output);
    callee->AddOutput(output->name(), value_map.at(output),
                      update == updates.end() ? nullptr : value_map.at(update->second));
  }

  std::vector<std::string> names;
  for (Value* output : outputs) names.push_back(graph.FreshName(output->name() + "."));
  MAGI_ASSIGN_OR_RETURN(Node * call, AddCall(graph, *callee, inputs, run.front(), std::move(names)));
  call->mutable_annotations().module_path = run.front()->annotations().module_path;
  call->mutable_annotations().phase = run.front()->annotations().phase;
  for (size_t i = 0; i < outputs.size(); ++i) graph.ReplaceAllUsesWith(outputs[i], call->result(static_cast<int>(i)));
  for (auto it = run.rbegin(); it != run.rend(); ++it) graph.EraseNode(*it);
  return absl::OkStatus();
}

}  // namespace

absl::Status InlinePartition(Module& module, Graph& graph, const std::string& callee) {
  const Graph* body = module.FindGraph(callee);
  if (body == nullptr) return absl::NotFoundError(absl::StrCat("module @", module.name(), " has no graph @", callee));
  for (Node* call : graph.nodes()) {
    if (call->op() != kCallOp || CalleeName(*call) != callee) continue;
    if (call->num_operands() != static_cast<int>(body->inputs().size()) ||
        call->num_results() != static_cast<int>(body->outputs().size())) {
      return absl::InvalidArgumentError(absl::StrCat(call->DebugName(), " does not match @", callee, "'s signature"));
    }
    absl::flat_hash_map<const Value*, Value*> value_map;
    for (size_t i = 0; i < body->inputs().size(); ++i) value_map[body->inputs()[i]] = call->operand(static_cast<int>(i));
    for (const Node* node : body->nodes()) CopyNode(*node, graph, value_map, /*before=*/call);
    for (size_t i = 0; i < body->outputs().size(); ++i) {
      graph.ReplaceAllUsesWith(call->result(static_cast<int>(i)), value_map.at(body->outputs()[i].value));
    }
    graph.EraseNode(call);
  }
  module.RemoveGraph(callee);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Partition>> OutlinePartitions(Module& module, Graph& graph, const std::string& backend,
                                                         const Capability& capability, int min_nodes,
                                                         int max_nodes) {
  if (min_nodes < 1 || max_nodes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition sizes: min_nodes must be >= 1 and max_nodes >= 0, got ", min_nodes, " and ", max_nodes));
  }
  std::vector<std::vector<Node*>> runs;
  std::vector<Node*> current;
  auto flush = [&] {
    if (static_cast<int>(current.size()) >= min_nodes) runs.push_back(current);
    current.clear();
  };
  for (Node* node : graph.nodes()) {
    if (!Outlinable(*node, capability)) {
      flush();
      continue;
    }
    current.push_back(node);
    if (max_nodes > 0 && static_cast<int>(current.size()) == max_nodes) flush();
  }
  flush();

  std::vector<Partition> partitions;
  int next = 0;
  for (const std::vector<Node*>& run : runs) {
    std::string name;
    do {
      name = absl::StrCat(graph.name(), ".", backend, ".", next++);
    } while (module.FindGraph(name) != nullptr);
    MAGI_RETURN_IF_ERROR(Outline(module, graph, run, name));
    Partition partition;
    partition.callee = name;
    partition.backend = backend;
    partition.num_nodes = static_cast<int>(run.size());
    const Graph& callee = *module.FindGraph(name);
    partition.structural_key = StructuralKey(callee);
    // Partitions that differ only in which outputs update an input in place compile apart.
    for (size_t i = 0; i < callee.outputs().size(); ++i) {
      const Value* aliases = callee.outputs()[i].aliases;
      if (aliases == nullptr) continue;
      const auto& inputs = callee.inputs();
      absl::StrAppend(&partition.structural_key, "alias ", i, "->",
                      std::find(inputs.begin(), inputs.end(), aliases) - inputs.begin(), ";");
    }
    partitions.push_back(std::move(partition));
  }
  return partitions;
}

}  // namespace magi
