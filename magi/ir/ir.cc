// Implementation of Value, Node, Graph and Module (they share invariants on use lists).
#include "absl/strings/string_view.h"
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/base/check.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"
#include "magi/ir/node.h"
#include "magi/ir/value.h"

namespace magi {

// ---------------------------------------------------------------------------- Value

absl::string_view InputRoleName(InputRole role) {
  switch (role) {
    case InputRole::kData:
      return "data";
    case InputRole::kParam:
      return "param";
    case InputRole::kBuffer:
      return "buffer";
    case InputRole::kOptState:
      return "opt_state";
    case InputRole::kRng:
      return "rng";
  }
  return "data";
}

std::optional<InputRole> ParseInputRole(absl::string_view name) {
  for (InputRole role :
       {InputRole::kData, InputRole::kParam, InputRole::kBuffer, InputRole::kOptState, InputRole::kRng}) {
    if (InputRoleName(role) == name) return role;
  }
  return std::nullopt;
}

void Value::RemoveUse(Use use) {
  auto it = std::find(uses_.begin(), uses_.end(), use);
  MAGI_CHECK(it != uses_.end()) << "use list of %" << name_ << " lost a use";
  *it = uses_.back();
  uses_.pop_back();
}

std::vector<Node*> Value::Users() const {
  std::vector<Node*> users;
  for (const Use& use : uses_) {
    if (std::find(users.begin(), users.end(), use.user) == users.end()) users.push_back(use.user);
  }
  return users;
}

// ----------------------------------------------------------------------------- Node

namespace {

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }

}  // namespace

bool IsValidOpName(absl::string_view op) {
  int parts = 0;
  while (true) {
    if (op.empty() || !IsIdentStart(op[0])) return false;
    size_t end = 1;
    while (end < op.size() && (IsIdentChar(op[end]) || op[end] == '.')) ++end;
    ++parts;
    if (end == op.size()) return parts >= 2;
    if (op.substr(end, 2) != "::") return false;
    op.remove_prefix(end + 2);
  }
}

bool IsValidArgumentName(absl::string_view name) {
  if (name.empty() || !IsIdentStart(name[0])) return false;
  for (char c : name) {
    if (!IsIdentChar(c)) return false;
  }
  return true;
}

std::string SourceLocation::ToString() const { return absl::StrCat(line, ":", column); }

absl::string_view RematDecisionName(RematDecision decision) {
  switch (decision) {
    case RematDecision::kUnset:
      return "unset";
    case RematDecision::kSave:
      return "save";
    case RematDecision::kRecompute:
      return "recompute";
  }
  return "unset";
}

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kUnset:
      return "unset";
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kOptimizer:
      return "opt";
  }
  return "unset";
}

std::optional<Phase> ParsePhase(absl::string_view name) {
  for (Phase phase : {Phase::kForward, Phase::kBackward, Phase::kOptimizer}) {
    if (PhaseName(phase) == name) return phase;
  }
  return std::nullopt;
}

absl::string_view Node::op_namespace() const {
  size_t pos = op_.find("::");
  return pos == std::string::npos ? absl::string_view() : absl::string_view(op_).substr(0, pos);
}

const Attribute* Node::FindArg(absl::string_view name) const {
  for (const Argument& arg : args_) {
    if (arg.name == name) return &arg.value;
  }
  return nullptr;
}

std::vector<Value*> Node::ArgOperands(int arg_index) const {
  const Attribute& value = args_.at(arg_index).value;
  std::vector<Value*> out;
  if (value.kind() == AttrKind::kOperand) {
    out.push_back(operands_.at(value.as_operand().index));
  } else if (value.kind() == AttrKind::kOperandList) {
    for (int index : value.as_operand_list().indices) {
      if (index != OperandListRef::kNoOperand) out.push_back(operands_.at(index));
    }
  }
  return out;
}

std::vector<Value*> Node::results() const {
  std::vector<Value*> out;
  out.reserve(results_.size());
  for (const auto& result : results_) out.push_back(result.get());
  return out;
}

void Node::ReplaceOperand(int i, Value* value) {
  MAGI_CHECK(value != nullptr && value->graph() == graph_) << "operand from another graph";
  Value*& slot = operands_.at(i);
  if (slot == value) return;
  slot->RemoveUse({this, i});
  slot = value;
  value->AddUse({this, i});
}

std::string Node::DebugName() const {
  std::string text = op_;
  if (!results_.empty()) absl::StrAppend(&text, " defining %", results_[0]->name());
  if (location_.known()) absl::StrAppend(&text, " at line ", location_.ToString());
  if (!annotations_.module_path.empty()) absl::StrAppend(&text, " in module '", annotations_.module_path, "'");
  return text;
}

// ---------------------------------------------------------------------------- Graph

Graph::~Graph() {
  // Nodes reference values of earlier nodes and inputs; drop them last-first so no
  // use list is touched after its value is gone.
  while (!nodes_.empty()) nodes_.pop_back();
}

std::string Graph::FreshName(absl::string_view prefix) {
  while (true) {
    std::string name = absl::StrCat(prefix, next_name_++);
    if (!values_by_name_.contains(name)) return name;
  }
}

std::string Graph::TakeName(std::string name) {
  if (name.empty()) name = FreshName();
  MAGI_CHECK(!values_by_name_.contains(name)) << "value name %" << name << " is taken in graph @" << name_;
  return name;
}

Value* Graph::RegisterValue(std::unique_ptr<Value> value) {
  Value* raw = value.get();
  values_by_name_[raw->name()] = raw;
  if (raw->is_graph_input()) {
    inputs_.push_back(std::move(value));
    input_ptrs_.push_back(raw);
  }
  return raw;
}

Value* Graph::AddInput(std::string name, Type type, InputRole role) {
  name = TakeName(std::move(name));
  return RegisterValue(std::unique_ptr<Value>(new Value(this, std::move(name), std::move(type), nullptr, 0, role)));
}

Node* Graph::AddNode(std::string op, std::vector<NodeArg> args, std::vector<Type> result_types, Node* before,
                     std::vector<std::string> result_names) {
  auto node = std::unique_ptr<Node>(new Node(this, std::move(op)));
  Node* raw = node.get();
  auto add_operand = [&](Value* value) {
    MAGI_CHECK(value != nullptr && value->graph() == this) << raw->op() << ": operand from another graph";
    int index = static_cast<int>(raw->operands_.size());
    raw->operands_.push_back(value);
    value->AddUse({raw, index});
    return index;
  };
  for (NodeArg& arg : args) {
    Attribute attribute;
    if (auto* value = std::get_if<Value*>(&arg.value)) {
      attribute = OperandRef{add_operand(*value)};
    } else if (auto* list = std::get_if<std::vector<Value*>>(&arg.value)) {
      OperandListRef ref;
      for (Value* value : *list) {
        ref.indices.push_back(value == nullptr ? OperandListRef::kNoOperand : add_operand(value));
      }
      attribute = std::move(ref);
    } else {
      attribute = std::move(std::get<Attribute>(arg.value));
      MAGI_CHECK(!attribute.is_operand_ref()) << raw->op() << ": pass values, not operand indices";
    }
    raw->args_.push_back({std::move(arg.name), std::move(attribute)});
  }
  for (size_t i = 0; i < result_types.size(); ++i) {
    std::string name = TakeName(i < result_names.size() ? std::move(result_names[i]) : std::string());
    auto value = std::unique_ptr<Value>(
        new Value(this, std::move(name), std::move(result_types[i]), raw, static_cast<int>(i), InputRole::kData));
    values_by_name_[value->name()] = value.get();
    raw->results_.push_back(std::move(value));
  }
  auto position = before == nullptr ? nodes_.end() : node_positions_.at(before);
  node_positions_[raw] = nodes_.insert(position, std::move(node));
  return raw;
}

void Graph::EraseInput(Value* input) {
  MAGI_CHECK(input->is_graph_input() && input->graph() == this) << "%" << input->name() << " is not an input";
  MAGI_CHECK(!input->has_uses()) << "erasing input %" << input->name() << " that is still used";
  for (const GraphOutput& output : outputs_) {
    MAGI_CHECK(output.value != input) << "erasing input %" << input->name() << " that is an output";
    MAGI_CHECK(output.aliases != input) << "erasing input %" << input->name() << " that is donated to an output";
  }
  values_by_name_.erase(input->name());
  input_ptrs_.erase(std::find(input_ptrs_.begin(), input_ptrs_.end(), input));
  inputs_.erase(std::find_if(inputs_.begin(), inputs_.end(), [&](const auto& v) { return v.get() == input; }));
}

int Graph::FindOutput(absl::string_view name) const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void Graph::EraseNode(Node* node) {
  for (const auto& result : node->results_) {
    MAGI_CHECK(!result->has_uses()) << "erasing " << node->DebugName() << " whose result %" << result->name()
                                    << " is still used";
    for (const GraphOutput& output : outputs_) {
      MAGI_CHECK(output.value != result.get()) << "erasing " << node->DebugName() << " whose result is an output";
    }
    values_by_name_.erase(result->name());
  }
  for (int i = 0; i < node->num_operands(); ++i) node->operands_[i]->RemoveUse({node, i});
  auto it = node_positions_.at(node);
  node_positions_.erase(node);
  nodes_.erase(it);
}

void Graph::MoveBefore(Node* node, Node* before) {
  auto from = node_positions_.at(node);
  auto to = before == nullptr ? nodes_.end() : node_positions_.at(before);
  nodes_.splice(to, nodes_, from);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& node : nodes_) out.push_back(node.get());
  return out;
}

Node* Graph::NodeAfter(const Node* node) const {
  auto it = node_positions_.find(node);
  MAGI_CHECK(it != node_positions_.end()) << "NodeAfter: node of another graph";
  auto next = std::next(it->second);
  return next == nodes_.end() ? nullptr : next->get();
}

void Graph::AddOutput(std::string name, Value* value, Value* aliases) {
  MAGI_CHECK(value != nullptr && value->graph() == this) << "output '" << name << "' from another graph";
  MAGI_CHECK(aliases == nullptr || aliases->graph() == this) << "output '" << name << "' aliases another graph's value";
  outputs_.push_back({std::move(name), value, aliases});
}

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  MAGI_CHECK(to != nullptr && to->graph() == this) << "replacement from another graph";
  if (from == to) return;
  std::vector<Use> uses = from->uses();
  for (const Use& use : uses) use.user->ReplaceOperand(use.operand_index, to);
  for (GraphOutput& output : outputs_) {
    if (output.value == from) output.value = to;
  }
}

Value* Graph::FindValue(absl::string_view name) const {
  auto it = values_by_name_.find(name);
  return it == values_by_name_.end() ? nullptr : it->second;
}

// --------------------------------------------------------------------------- Module

const ProcessGroup* Module::AddProcessGroup(ProcessGroup group) {
  MAGI_CHECK(FindProcessGroup(group.name) == nullptr) << "process group @" << group.name << " exists";
  groups_.push_back(std::make_unique<ProcessGroup>(std::move(group)));
  return groups_.back().get();
}

const ProcessGroup* Module::FindProcessGroup(absl::string_view name) const {
  for (const auto& group : groups_) {
    if (group->name == name) return group.get();
  }
  return nullptr;
}

Graph* Module::AddGraph(std::string name) {
  MAGI_CHECK(FindGraph(name) == nullptr) << "graph @" << name << " exists";
  graphs_.push_back(std::make_unique<Graph>(std::move(name), this));
  return graphs_.back().get();
}

Graph* Module::FindGraph(absl::string_view name) const {
  for (const auto& graph : graphs_) {
    if (graph->name() == name) return graph.get();
  }
  return nullptr;
}

bool Module::RemoveGraph(absl::string_view name) {
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if ((*it)->name() == name) {
      graphs_.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<Graph*> Module::graphs() const {
  std::vector<Graph*> out;
  for (const auto& graph : graphs_) out.push_back(graph.get());
  return out;
}

}  // namespace magi
