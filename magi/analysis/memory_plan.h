// Liveness-based memory planning of a graph, in the same accounting the interpreter
// measures (RunStats::peak_live_bytes), over the storage lifetimes of liveness.h: a value
// occupies its storage from the node that makes it until after its last use (graph
// outputs until the end; inputs from the start); results of view ops (view, t,
// transpose, slice, select, expand, permute, as_strided, ...) share their base's storage,
// which lives until the last use of any of its aliases. A collective's results count
// from its start (where the runtime allocates them) and its inputs stay alive until its
// wait.
//
// Besides the peak, it assigns every storage to a reusable buffer (greedy first fit over
// lifetimes): buffers never hold two storages alive at once, so total_buffer_bytes() is
// what a runtime preallocating them would need.
//
// Device and host: in a graph that computes on an accelerator, CPU tensors are host
// memory (liveness.h: CPU offload's optimizer state). The peak, its node and live_after
// are the device's; the host's peak is reported apart (host_peak_bytes), and buffers never
// mix the two. A graph on the CPU alone has no host account: the CPU is its device.
//
// A node may need more memory while it runs than its results: a partition call
// (magi::call) allocates its inner buffers too. `working_bytes`, when given, says how
// much a node allocates at its peak beyond its operands, results included; the peak
// counts max(results, working bytes) at that node, the bytes live after it only its
// results (the cost model's CostModel::WorkingBytes: a compiled partition's measured
// peak, else its callee's own plan).
//
// What it does not model: allocator fragmentation and rounding, ATen kernels' temporary
// workspaces, tensors the caller keeps alive after giving them to the graph, and storage
// that kernels share without a view op in the IR (so it errs high: on the tiny Llama
// training step it predicts 990,100 bytes where the interpreter measures 957,076).
#ifndef MAGI_ANALYSIS_MEMORY_PLAN_H_
#define MAGI_ANALYSIS_MEMORY_PLAN_H_

#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/analysis/liveness.h"
#include "magi/ir/graph.h"

namespace magi {

struct MemoryPlan {
  // The device's memory (all of it in a graph on the CPU alone).
  int64_t peak_bytes = 0;
  int64_t start_bytes = 0;                           // live before the first node (the inputs)
  int peak_node = -1;                                // program index of the node where the peak is reached (-1: inputs)
  std::vector<int64_t> live_after;                   // bytes live after each node
  // Host memory of a graph that computes on an accelerator (0 and -1 when there is none).
  int64_t host_peak_bytes = 0;
  int host_peak_node = -1;
  std::vector<int64_t> buffer_sizes;                 // one entry per reusable buffer
  std::vector<bool> buffer_on_host;                  // per buffer: it holds host storages
  absl::flat_hash_map<const Value*, int> buffer_of;  // storage-owning value -> buffer

  int64_t total_buffer_bytes() const;  // saturates at INT64_MAX
};

// Bytes `node` allocates at its peak while it runs beyond its operands, its results
// included (0: just its results). Device memory; a host-only node has none.
using WorkingBytesFn = std::function<int64_t(const Node& node)>;

// FailedPrecondition if a value's size is not static; OutOfRange, naming the value or
// the node, if a byte count (one value's, or the bytes live at a node) does not fit in
// int64. Without `assign_buffers` only the peak and live_after are computed (what
// schedulers and searches need; much cheaper).
absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, bool assign_buffers = true,
                                      const LivenessOptions& options = {},
                                      const WorkingBytesFn& working_bytes = nullptr);
// The same with the program order given (`nodes` is graph.nodes()).
absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, absl::Span<Node* const> nodes, bool assign_buffers,
                                      const LivenessOptions& options = {},
                                      const WorkingBytesFn& working_bytes = nullptr);

// The device storages live while the node at program index `index` runs (made at or
// before it, read at or after it or never read, as PlanMemory counts them; -1: before the
// first node), largest first: what a peak is made of.
std::vector<StorageLifetime> StoragesLiveAt(const Liveness& liveness, int index);

}  // namespace magi

#endif  // MAGI_ANALYSIS_MEMORY_PLAN_H_
