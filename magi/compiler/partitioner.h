// Splits a step graph into partitions per backend: runs of consecutive compute nodes a
// partition backend accepts are outlined into graphs of their own and called from the
// step through magi::call nodes (magi/ir/magi_ops.h).
//
//   absl::StatusOr<std::vector<Partition>> parts =
//       OutlinePartitions(module, *step, "elementwise", backend->GetCapability(module, *step), options);
//   // @train_step now has `%r = magi::call([%a, %b], callee = "train_step.elementwise.0")`
//   // and the module has @train_step.elementwise.0 holding the outlined nodes.
//
// What it does: walks the graph in program order; a run is a maximal sequence of
// consecutive nodes the capability accepts that are neither communication (collective
// starts and waits stay with the primary backend, which runs the schedule) nor calls;
// runs shorter than `min_nodes` are left alone, runs longer than `max_nodes` split.
// Each run becomes one graph: values it reads from outside are its inputs (same names
// and roles), values used after it or returned by the step are its outputs. Program
// order is kept, so outlining never creates a cycle or moves work across a collective.
// What it does NOT do: reorder nodes to make longer runs, or merge non-adjacent runs.
// No LibTorch.
#ifndef MAGI_COMPILER_PARTITIONER_H_
#define MAGI_COMPILER_PARTITIONER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/backend.h"
#include "magi/ir/graph_utils.h"  // StructuralKey
#include "magi/ir/module.h"

namespace magi {

struct Partition {
  std::string callee;   // the outlined graph
  std::string backend;  // the backend that compiles it
  int num_nodes = 0;
  // Partitions with equal keys are structurally identical (same ops, arguments and
  // types, whatever the value names): one compiled executable serves them all.
  std::string structural_key;
};

// Outlines the runs of `graph` that `capability` accepts for `backend` (see above).
// Graph names are "<graph>.<backend>.<k>" with k counting from the module's existing
// ones. `min_nodes` >= 1; `max_nodes` 0 means unbounded.
absl::StatusOr<std::vector<Partition>> OutlinePartitions(Module& module, Graph& graph, const std::string& backend,
                                                         const Capability& capability, int min_nodes = 1,
                                                         int max_nodes = 0);

// Undoes outlining for one partition: every magi::call of `callee` in `graph` is replaced
// by copies of the callee's nodes (annotations kept), and the callee graph is removed from
// `module`. The compile driver uses it when a partition fails to compile, so that the
// primary backend runs its nodes. NotFound if `module` has no graph `callee`.
absl::Status InlinePartition(Module& module, Graph& graph, const std::string& callee);


}  // namespace magi

#endif  // MAGI_COMPILER_PARTITIONER_H_
