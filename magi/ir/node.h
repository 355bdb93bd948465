// An operation of the graph IR.
//
// A node has an op name that follows ATen's schema names ("aten::addmm",
// "aten::add.Tensor" with the overload after the dot) or Magi's own namespace
// ("magi::all_gather_start"); an ordered argument list that mirrors the schema (see
// attribute.h); the operand values those arguments reference; its results; and
// annotations that later passes fill (stream, schedule position, recompute decision,
// bucket) plus the module path that produced it. Nodes are created and owned by a
// Graph (Graph::AddNode / NodeBuilder); pointers to them stay valid until erased.
#ifndef MAGI_IR_NODE_H_
#define MAGI_IR_NODE_H_

#include "absl/strings/string_view.h"
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "magi/ir/attribute.h"
#include "magi/ir/value.h"

namespace magi {

class Graph;

// True if `op` is a namespaced op name the text format can carry: two or more parts
// joined by "::", each [A-Za-z_][A-Za-z0-9_.]* ("aten::add.Tensor", "magi::wait").
bool IsValidOpName(absl::string_view op);
// True if `name` can name a keyword argument: [A-Za-z_][A-Za-z0-9_]*.
bool IsValidArgumentName(absl::string_view name);

// Where in a text file something was parsed from; line 0 means "not from text".
struct SourceLocation {
  int line = 0;
  int column = 0;
  bool known() const { return line > 0; }
  std::string ToString() const;
};

// What AutoRecompute decided for a node's results.
enum class RematDecision : uint8_t { kUnset, kSave, kRecompute };
absl::string_view RematDecisionName(RematDecision decision);

// Which part of a training step a node belongs to.
enum class Phase : uint8_t { kUnset, kForward, kBackward, kOptimizer };
absl::string_view PhaseName(Phase phase);  // "fwd", "bwd", "opt"
std::optional<Phase> ParsePhase(absl::string_view name);

// Facts about a node that passes fill in; all optional (-1 / empty / kUnset).
struct NodeAnnotations {
  std::string module_path;  // e.g. "layers.3.mlp.up_proj"
  int stream = -1;          // execution stream chosen by the scheduler
  int64_t schedule = -1;    // position in the chosen schedule
  RematDecision remat = RematDecision::kUnset;
  int64_t bucket = -1;  // collective bucket this node belongs to
  Phase phase = Phase::kUnset;  // forward, backward or optimizer (set by capture)
  bool operator==(const NodeAnnotations& o) const {
    return module_path == o.module_path && stream == o.stream && schedule == o.schedule && remat == o.remat &&
           bucket == o.bucket && phase == o.phase;
  }
};

class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& op() const { return op_; }
  // The namespace of the op: "aten" for "aten::mm".
  absl::string_view op_namespace() const;

  absl::Span<Value* const> operands() const { return operands_; }
  Value* operand(int i) const { return operands_.at(i); }
  int num_operands() const { return static_cast<int>(operands_.size()); }

  const std::vector<Argument>& args() const { return args_; }
  // The argument called `name`, or null.
  const Attribute* FindArg(absl::string_view name) const;
  // The operand values of argument `arg_index` (one for kOperand, the non-none ones of a list).
  std::vector<Value*> ArgOperands(int arg_index) const;

  int num_results() const { return static_cast<int>(results_.size()); }
  Value* result(int i) const { return results_.at(i).get(); }
  std::vector<Value*> results() const;

  Graph* graph() const { return graph_; }
  const NodeAnnotations& annotations() const { return annotations_; }
  NodeAnnotations& mutable_annotations() { return annotations_; }
  const SourceLocation& location() const { return location_; }
  void set_location(SourceLocation location) { location_ = location; }

  // Makes operand `i` read `value` instead (updates both values' use lists).
  // `value` must belong to the same graph.
  void ReplaceOperand(int i, Value* value);

  // "aten::mm (%3 = ..., line 7:5)" style description for error messages.
  std::string DebugName() const;

 private:
  friend class Graph;
  Node(Graph* graph, std::string op) : graph_(graph), op_(std::move(op)) {}

  Graph* graph_;
  std::string op_;
  std::vector<Value*> operands_;
  std::vector<Argument> args_;
  std::vector<std::unique_ptr<Value>> results_;
  NodeAnnotations annotations_;
  SourceLocation location_;
};

}  // namespace magi

#endif  // MAGI_IR_NODE_H_
