#include "magi/ir/graph_utils.h"

#include <queue>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/base/check.h"
#include "magi/base/fnv1a.h"

namespace magi {

absl::StatusOr<std::vector<Node*>> TopologicalOrder(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  absl::flat_hash_map<const Node*, int> position;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) position[nodes[i]] = i;
  std::vector<int> pending(nodes.size(), 0);
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    absl::flat_hash_set<const Node*> producers;
    for (const Value* operand : nodes[i]->operands()) {
      if (operand->producer() != nullptr) producers.insert(operand->producer());
    }
    pending[i] = static_cast<int>(producers.size());
  }
  // Min-heap on program position keeps the existing order where it is valid.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<Node*> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    Node* node = nodes[ready.top()];
    ready.pop();
    order.push_back(node);
    absl::flat_hash_set<const Node*> released;
    for (const Value* result : node->results()) {
      for (const Use& use : result->uses()) {
        if (released.insert(use.user).second && --pending[position.at(use.user)] == 0) {
          ready.push(position.at(use.user));
        }
      }
    }
  }
  if (order.size() != nodes.size()) {
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
      if (pending[i] > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("graph @", graph.name(), " has a cycle through ", nodes[i]->DebugName()));
      }
    }
  }
  return order;
}

absl::Status SortTopologically(Graph& graph) {
  absl::StatusOr<std::vector<Node*>> order = TopologicalOrder(graph);
  if (!order.ok()) return order.status();
  for (Node* node : *order) graph.MoveBefore(node, nullptr);
  return absl::OkStatus();
}

Node* CopyNode(const Node& node, Graph& dst, absl::flat_hash_map<const Value*, Value*>& value_map, Node* before) {
  auto mapped = [&](int index) {
    auto it = value_map.find(node.operand(index));
    MAGI_CHECK(it != value_map.end()) << "CopyNode: operand %" << node.operand(index)->name() << " is not mapped";
    return it->second;
  };
  std::vector<NodeArg> args;
  for (const Argument& arg : node.args()) {
    if (arg.value.kind() == AttrKind::kOperand) {
      args.emplace_back(mapped(arg.value.as_operand().index), arg.name);
    } else if (arg.value.kind() == AttrKind::kOperandList) {
      std::vector<Value*> values;
      for (int index : arg.value.as_operand_list().indices) {
        values.push_back(index == OperandListRef::kNoOperand ? nullptr : mapped(index));
      }
      args.emplace_back(std::move(values), arg.name);
    } else {
      args.emplace_back(arg.value, arg.name);
    }
  }
  std::vector<Type> types;
  std::vector<std::string> names;
  for (const Value* result : node.results()) {
    types.push_back(result->type());
    names.push_back(dst.FindValue(result->name()) == nullptr ? result->name() : dst.FreshName(result->name() + "."));
  }
  Node* copy = dst.AddNode(node.op(), std::move(args), std::move(types), before, std::move(names));
  copy->mutable_annotations() = node.annotations();
  copy->set_location(node.location());
  for (int i = 0; i < node.num_results(); ++i) value_map[node.result(i)] = copy->result(i);
  return copy;
}

namespace {

void CopyGraphInto(const Graph& src, Graph& dst) {
  absl::flat_hash_map<const Value*, Value*> value_map;
  for (const Value* input : src.inputs()) value_map[input] = dst.AddInput(input->name(), input->type(), input->role());
  for (const Node* node : src.nodes()) CopyNode(*node, dst, value_map);
  for (const GraphOutput& output : src.outputs()) {
    dst.AddOutput(output.name, value_map.at(output.value),
                  output.aliases == nullptr ? nullptr : value_map.at(output.aliases));
  }
}

}  // namespace

std::unique_ptr<Graph> CloneGraph(const Graph& graph, std::string name) {
  auto copy = std::make_unique<Graph>(std::move(name));
  CopyGraphInto(graph, *copy);
  return copy;
}

std::unique_ptr<Module> CloneModule(const Module& module) {
  auto copy = std::make_unique<Module>(module.name());
  for (const auto& group : module.process_groups()) copy->AddProcessGroup(*group);
  for (const Graph* graph : module.graphs()) CopyGraphInto(*graph, *copy->AddGraph(graph->name()));
  return copy;
}

absl::StatusOr<std::unique_ptr<Graph>> ExtractSubgraph(const Graph& graph, absl::Span<Node* const> nodes,
                                                       std::string name) {
  absl::flat_hash_set<const Node*> selected;
  for (const Node* node : nodes) {
    if (node->graph() != &graph) {
      return absl::InvalidArgumentError(absl::StrCat(node->DebugName(), " is not in graph @", graph.name()));
    }
    selected.insert(node);
  }
  absl::flat_hash_set<const Value*> graph_outputs;
  for (const GraphOutput& output : graph.outputs()) graph_outputs.insert(output.value);

  auto sub = std::make_unique<Graph>(std::move(name));
  absl::flat_hash_map<const Value*, Value*> value_map;
  std::vector<const Value*> results_in_order;
  for (const Node* node : graph.nodes()) {
    if (!selected.contains(node)) continue;
    for (const Value* operand : node->operands()) {
      if (value_map.contains(operand)) continue;
      value_map[operand] = sub->AddInput(operand->name(), operand->type(), operand->role());
    }
    CopyNode(*node, *sub, value_map);
    for (const Value* result : node->results()) results_in_order.push_back(result);
  }
  for (const Value* result : results_in_order) {
    bool escapes = graph_outputs.contains(result);
    for (const Use& use : result->uses()) escapes = escapes || !selected.contains(use.user);
    if (escapes) sub->AddOutput(result->name(), value_map.at(result));
  }
  return sub;
}

std::string StructuralKey(const Graph& graph) {
  absl::flat_hash_map<const Value*, int> number;
  std::string key;
  for (const Value* input : graph.inputs()) {
    absl::StrAppend(&key, "in ", input->type().ToString(), " ", InputRoleName(input->role()), ";");
    number.emplace(input, static_cast<int>(number.size()));
  }
  for (const Node* node : graph.nodes()) {
    absl::StrAppend(&key, node->op(), "(");
    for (const Argument& arg : node->args()) {
      absl::StrAppend(&key, arg.name, "=");
      if (arg.value.kind() == AttrKind::kOperand) {
        absl::StrAppend(&key, "$", number.at(node->operand(arg.value.as_operand().index)));
      } else if (arg.value.kind() == AttrKind::kOperandList) {
        absl::StrAppend(&key, "[");
        for (int index : arg.value.as_operand_list().indices) {
          absl::StrAppend(&key, index == OperandListRef::kNoOperand ? std::string("none")
                                                                     : absl::StrCat("$", number.at(node->operand(index))),
                          ",");
        }
        absl::StrAppend(&key, "]");
      } else {
        absl::StrAppend(&key, arg.value.ToString());
      }
      absl::StrAppend(&key, ",");
    }
    absl::StrAppend(&key, ")->");
    for (const Value* result : node->results()) {
      absl::StrAppend(&key, result->type().ToString(), ",");
      number.emplace(result, static_cast<int>(number.size()));
    }
    absl::StrAppend(&key, ";");
  }
  for (const GraphOutput& output : graph.outputs()) absl::StrAppend(&key, "out $", number.at(output.value), ";");
  return key;
}

std::string StructuralHash(const Graph& graph) { return Fnv1a64Hex(StructuralKey(graph)); }

}  // namespace magi
