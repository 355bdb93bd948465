// An SSA value of the graph IR: a graph input or one result of a node.
//
// Values are immutable once created (their type never changes after the node that
// defines them is built); the graph owns them. Each value keeps its uses (node and
// operand position) so passes can walk def-use chains and replace uses cheaply.
#ifndef MAGI_IR_VALUE_H_
#define MAGI_IR_VALUE_H_

#include "absl/strings/string_view.h"
#include <string>
#include <vector>

#include "magi/ir/types.h"

namespace magi {

class Graph;
class Node;

// What a graph input is, for passes and runtimes that treat parameters, buffers and
// optimizer state differently from data.
enum class InputRole : uint8_t {
  kData,      // a batch: tokens, labels, ...
  kParam,     // a trainable parameter (its fully qualified module name is the value name)
  kBuffer,    // a non-trainable module buffer
  kOptState,  // optimizer state (AdamW moments, step)
  kRng,       // a random seed / offset
};
absl::string_view InputRoleName(InputRole role);
std::optional<InputRole> ParseInputRole(absl::string_view name);

// One use of a value: `user->operand(operand_index)` is the value.
struct Use {
  Node* user = nullptr;
  int operand_index = 0;
  bool operator==(const Use& o) const { return user == o.user && operand_index == o.operand_index; }
};

class Value {
 public:
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  // The name printed after '%': unique within its graph.
  const std::string& name() const { return name_; }
  const Type& type() const { return type_; }

  // The node that defines this value; null for a graph input.
  Node* producer() const { return producer_; }
  // Which result of the producer this is (0 for graph inputs).
  int result_index() const { return result_index_; }
  bool is_graph_input() const { return producer_ == nullptr; }
  InputRole role() const { return role_; }
  Graph* graph() const { return graph_; }

  // Every operand slot that reads this value, in no particular order. Graph outputs
  // are not uses; see Graph::outputs().
  const std::vector<Use>& uses() const { return uses_; }
  bool has_uses() const { return !uses_.empty(); }
  // The distinct nodes that use this value, in first-use order of `uses()`.
  std::vector<Node*> Users() const;

 private:
  friend class Graph;
  friend class Node;
  Value(Graph* graph, std::string name, Type type, Node* producer, int result_index, InputRole role)
      : graph_(graph),
        name_(std::move(name)),
        type_(std::move(type)),
        producer_(producer),
        result_index_(result_index),
        role_(role) {}

  void AddUse(Use use) { uses_.push_back(use); }
  void RemoveUse(Use use);

  Graph* graph_;
  std::string name_;
  Type type_;
  Node* producer_;
  int result_index_;
  InputRole role_;
  std::vector<Use> uses_;
};

}  // namespace magi

#endif  // MAGI_IR_VALUE_H_
