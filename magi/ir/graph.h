// A graph of the IR: named inputs, nodes in program order, named outputs.
//
// One graph holds a whole step (forward, loss, backward, optimizer) or a forward
// pass. The node list is a valid execution order: every operand is a graph input or
// the result of an earlier node (the verifier checks this). The graph owns its
// inputs and nodes; the raw pointers it hands out stay valid until the node is erased
// or the graph destroyed. There is no control flow: a graph is one basic block.
//
//   Graph g("step");
//   Value* x = g.AddInput("x", Type::Tensor({DType::kFloat32, {8, 16}}));
//   Value* w = g.AddInput("fc.weight", Type::Tensor({DType::kFloat32, {16, 16}}), InputRole::kParam);
//   Node* mm = g.AddNode("aten::mm", {NodeArg(x), NodeArg(w)}, {Type::Tensor({DType::kFloat32, {8, 16}})});
//   g.AddOutput("y", mm->result(0));
#ifndef MAGI_IR_GRAPH_H_
#define MAGI_IR_GRAPH_H_

#include "absl/strings/string_view.h"
#include <list>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "magi/ir/node.h"
#include "magi/ir/value.h"

namespace magi {

class Module;

// An argument given when creating a node: a value, a list of values (null entries
// stand for `none`), or a constant; optionally named (keyword argument).
struct NodeArg {
  NodeArg(Value* value, std::string arg_name = "") : name(std::move(arg_name)), value(value) {}
  NodeArg(std::vector<Value*> values, std::string arg_name = "")
      : name(std::move(arg_name)), value(std::move(values)) {}
  NodeArg(Attribute constant, std::string arg_name = "") : name(std::move(arg_name)), value(std::move(constant)) {}

  std::string name;
  std::variant<Attribute, Value*, std::vector<Value*>> value;
};

// A named graph output (for a training step: "loss", "<param>.grad", ...).
//
// Donation (XLA's input/output aliasing): `aliases` names a graph input whose storage the
// caller gives up for this output, e.g. an optimizer step's new parameter shard and the
// old one. The caller must not read that input after the run; a runtime may write the
// output into the input's storage (in place) or free the input after its last read, and
// the memory planner counts them as one storage where the output's producer can run in
// place (see magi/analysis/liveness.h). Null: nothing donated.
struct GraphOutput {
  std::string name;
  Value* value = nullptr;
  Value* aliases = nullptr;  // a graph input of the same graph and type, or null
};

class Graph {
 public:
  explicit Graph(std::string name, Module* module = nullptr) : name_(std::move(name)), module_(module) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  const std::string& name() const { return name_; }
  // The module that owns this graph; null for a standalone graph.
  Module* module() const { return module_; }

  // Adds an input. An empty name gets a fresh numeric one; a taken name is a
  // programmer error (parsers check with FindValue first).
  Value* AddInput(std::string name, Type type, InputRole role = InputRole::kData);
  absl::Span<Value* const> inputs() const { return input_ptrs_; }
  // Removes an input that has no uses, is no output and is donated to none (programmer error otherwise).
  void EraseInput(Value* input);

  // Creates a node with `args` and one result per entry of `result_types`, inserted
  // before `before` (appended when null). Result names default to fresh numbers.
  Node* AddNode(std::string op, std::vector<NodeArg> args, std::vector<Type> result_types,
                Node* before = nullptr, std::vector<std::string> result_names = {});
  // Removes a node whose results have no uses and are not outputs (programmer error otherwise).
  void EraseNode(Node* node);
  // Moves `node` right before `before` (to the end when null). The caller keeps the order valid.
  void MoveBefore(Node* node, Node* before);

  // Nodes in program order.
  std::vector<Node*> nodes() const;
  // The node after `node` in program order, or null after the last (`node` must be this
  // graph's: programmer error otherwise).
  Node* NodeAfter(const Node* node) const;
  int num_nodes() const { return static_cast<int>(nodes_.size()); }

  // `aliases`: the donated input this output may reuse (see GraphOutput), or null.
  void AddOutput(std::string name, Value* value, Value* aliases = nullptr);
  void SetOutputAlias(int index, Value* input) { outputs_.at(index).aliases = input; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  void SetOutputValue(int index, Value* value) { outputs_.at(index).value = value; }
  void RemoveOutput(int index) { outputs_.erase(outputs_.begin() + index); }
  // The index of the output called `name`, or -1.
  int FindOutput(absl::string_view name) const;

  // Makes every use of `from`, and every output that is `from`, use `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);

  // The value named `name` (input or node result), or null.
  Value* FindValue(absl::string_view name) const;
  // A name no value of this graph has, built from `prefix` ("" gives "0", "1", ...).
  std::string FreshName(absl::string_view prefix = "");

 private:
  friend class Node;
  Value* RegisterValue(std::unique_ptr<Value> value);
  std::string TakeName(std::string name);

  std::string name_;
  Module* module_;
  std::vector<std::unique_ptr<Value>> inputs_;
  std::vector<Value*> input_ptrs_;
  std::list<std::unique_ptr<Node>> nodes_;
  absl::flat_hash_map<const Node*, std::list<std::unique_ptr<Node>>::iterator> node_positions_;
  std::vector<GraphOutput> outputs_;
  absl::flat_hash_map<std::string, Value*> values_by_name_;
  int64_t next_name_ = 0;
};

}  // namespace magi

#endif  // MAGI_IR_GRAPH_H_
