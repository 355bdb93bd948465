// Storage lifetimes of a graph, in program order (the schedule the runtime executes).
//
// Every tensor value either owns a storage or, for the results of view ops (see
// op_traits.h), shares the storage of the view's base. A partition call's (magi::call)
// result that its callee returns as a view of a callee input or of another output shares
// that operand's or that result's storage: compiled partitions (Inductor's, the
// interpreter's) return such views, not copies. A storage is born where the
// runtime allocates it (a graph input: before the first node; a node's results: at the
// node; a collective's results: at its start, even though its wait names them) and dies
// after the last node that needs it: its last reader, through any alias; a collective's
// inputs until its wait; a graph output at the end. Futures own no storage.
//
// Graph inputs are taken to be handed over to the runtime, which frees each after its
// last read (a caller that keeps its own reference keeps it alive longer: with
// `inputs_held_by_caller` every input not donated lives to the end). Donation: an
// output that aliases a graph input (GraphOutput::aliases) and is produced by a node that
// writes it over that input in place (InPlaceOperandOfResult, e.g. magi::adamw) at the
// input's last read shares the input's storage: the node allocates nothing for it.
//
//   absl::StatusOr<Liveness> liveness = ComputeLiveness(graph);
//   for (const StorageLifetime& s : liveness->storages) ...  // bytes, born, dies
//
// Host memory: in a graph that computes on an accelerator (some tensor on CUDA), the
// storages of CPU tensors are host memory (CPU offload's optimizer state), marked `host`
// so planners count them apart from the device's. In a graph on the CPU alone, the CPU
// is the device and nothing is marked.
//
// It does not decide anything (that is the memory planner's job, memory_plan.h) and does
// not model kernels' temporary workspaces.
#ifndef MAGI_ANALYSIS_LIVENESS_H_
#define MAGI_ANALYSIS_LIVENESS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "magi/ir/graph.h"

namespace magi {

// One storage: the value that owns it, its size and its lifetime in program indices.
struct StorageLifetime {
  const Value* value = nullptr;  // the owner (an input or a node result); never null
  int64_t bytes = 0;
  int born = -1;  // program index of the node that allocates it; -1: a graph input
  int dies = -1;  // last program index that needs it; num_nodes: a graph output; -1: never read
  bool host = false;  // host memory of a graph that computes on an accelerator (see above)
};

struct Liveness {
  int num_nodes = 0;
  std::vector<StorageLifetime> storages;               // inputs first, then in allocation order
  absl::flat_hash_map<const Value*, int> storage_of;  // every tensor value -> index in `storages`
  // Results written in place over a donated input (see above): result -> that input.
  absl::flat_hash_map<const Value*, const Value*> in_place;
};

struct LivenessOptions {
  // The caller keeps every input it did not donate (GraphOutput::aliases) until the run
  // ends, as a trainer holding its state while the step runs does.
  bool inputs_held_by_caller = false;
};

// FailedPrecondition naming the value if a tensor's size is not static; OutOfRange
// naming it if its byte count does not fit in int64.
absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph, const LivenessOptions& options = {});
// The same with the program order given (`nodes` is graph.nodes(), already at hand:
// walking a large graph's node list is a measurable part of a search's probes).
absl::StatusOr<Liveness> ComputeLiveness(const Graph& graph, absl::Span<Node* const> nodes,
                                         const LivenessOptions& options = {});

}  // namespace magi

#endif  // MAGI_ANALYSIS_LIVENESS_H_
