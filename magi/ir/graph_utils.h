// Whole-graph utilities: topological order, cloning, subgraph extraction.
//
// None of these change the graph they read, except SortTopologically.
#ifndef MAGI_IR_GRAPH_UTILS_H_
#define MAGI_IR_GRAPH_UTILS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

// The nodes ordered so each follows the producers of its operands, keeping program
// order wherever it already satisfies that (Kahn's algorithm, earliest node first).
// FailedPrecondition naming a node on the cycle if the def-use edges form one.
absl::StatusOr<std::vector<Node*>> TopologicalOrder(const Graph& graph);
// Reorders `graph`'s nodes into TopologicalOrder(graph).
absl::Status SortTopologically(Graph& graph);

// Copies `node` into `dst` (appended, or inserted before `before`), mapping operands
// through `value_map`, which must hold every operand; adds the copy's results to
// `value_map`. Result names are kept where `dst` does not have them yet.
Node* CopyNode(const Node& node, Graph& dst, absl::flat_hash_map<const Value*, Value*>& value_map,
               Node* before = nullptr);

// A deep copy of `graph` (names, types, annotations, locations), standalone.
std::unique_ptr<Graph> CloneGraph(const Graph& graph, std::string name);
// A deep copy of `module`.
std::unique_ptr<Module> CloneModule(const Module& module);

// A standalone graph holding copies of `nodes` (any order; copied in program order).
// Values they use that are produced outside the set become inputs with the same name
// and role; results used outside the set, or graph outputs, become outputs named
// after the value. InvalidArgument if a node is not in `graph`.
absl::StatusOr<std::unique_ptr<Graph>> ExtractSubgraph(const Graph& graph, absl::Span<Node* const> nodes,
                                                       std::string name);

// A key equal for graphs that compute the same thing: input types, ops, constant
// arguments, result types and how values connect, but not value names or annotations.
// (Identical partitions share one compiled executable and one measured time.)
std::string StructuralKey(const Graph& graph);
// StructuralKey's 64-bit FNV-1a as 16 hex digits: stable across runs and hosts.
std::string StructuralHash(const Graph& graph);

}  // namespace magi

#endif  // MAGI_IR_GRAPH_UTILS_H_
