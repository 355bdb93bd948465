// The schedule the "nccl_stream" runtime executes, decided once per compiled graph and
// kept free of CUDA and LibTorch so it is tested on the CPU (stream_plan_test.cc).
//
// Streams: stream 0 is the compute stream (the caller's current CUDA stream); every
// (process group, annotated stream) pair of the collectives gets a communication
// stream 1..K of its own, with its own NCCL communicator, so an all-gather and a
// reduce-scatter of one group can overlap (one NCCL communicator must not run two
// collectives at once). Collectives without a stream annotation use the simulator's
// defaults (all-gather 1, reduce-scatter 2, others 3).
//
// Cross-stream edges: a collective start records an event on the compute stream after
// its inputs and output buffer exist, and its communication stream waits for it; its
// wait makes the compute stream wait for an event the communication stream records
// after the collective. Those two are the only edges: every other node runs on the
// compute stream, in program order.
//
// Buffer lifetimes with a caching allocator: every buffer is allocated and freed on the
// compute stream. A buffer a collective reads or writes (its inputs, its output buffer)
// is released no earlier than the collective's wait, after which the compute stream
// has waited for the communication stream, so the allocator can never hand its memory
// to a kernel that runs while the collective still touches it. No recordStream needed,
// so the same code is safe inside a CUDA graph capture.
//
// Collectives of groups of one rank are skipped when asked: their results are their
// inputs (all-gather and reduce-scatter over one rank are identities, "avg" included).
//
// magi::adamw nodes whose results only leave the graph (are outputs) are batched into
// one multi-tensor launch at the position of the batch's last member; a batch updates
// its parameter and moments in place when they are graph inputs the caller donated and
// nothing else reads them after the update. magi::adamw_split (split fp32 masters:
// magi/passes/split_master_weights.h) is batched the same way, in batches of its own, the
// parameter's two halves counting as the parameter.
//
// Optimizer overlap (overlap_optimizer): the FSDP rewrite appends every magi::adamw after
// the backward, so by default the whole update (~29 bytes of memory traffic per parameter,
// 6.3 ms on the 953M step on one H200) runs after the last gradient. With overlap, the
// batches instead run on an optimizer stream of their own, each as soon as its members
// can: after the node that makes the last of their operands (a gradient, usually in the
// middle of backward) and after the last read of their parameter and moments by anything
// else. A batch closes when the next member becomes ready later and the batch holds at
// least `min_overlap_batch_elements` parameters (small launches cost more than they
// hide). The batch waits for an event the compute stream records after that node; at
// the end of the step the compute stream waits for the optimizer stream. Everything a
// batch reads stays held until that join (release_at_end), so the caching allocator
// cannot give its memory to a kernel on the compute stream while the batch still reads
// it. Only in-place batches overlap (their results are their donated inputs, nothing is
// allocated for them) and the fused kernel takes them (fp32 state, gradient and scalars
// on CUDA); otherwise the plan stays as without overlap. "Reads" of the state include
// reads through anything sharing its memory: views of it, a skipped collective's results
// (its inputs), a magi::call's results. The memory-bound update then fills what the
// backward's kernels leave of the GPU (wave tails, small kernels) instead of running
// after it; compute and optimizer streams have the same (default) priority. On one H200
// that hid nothing measurable (docs/benchmarks.md); it is opt-in.
//
// Deferred gradient casts (mixed precision, groups of one rank): a bf16 -> fp32
// aten::_to_copy whose result only feeds skipped reduce-scatters (or all-reduces), whose
// results in turn are only the gradient operand of batched magi::adamw nodes (either form) on CUDA, is
// not run: its bf16 operand flows through in place of the fp32 value, and the
// multi-tensor AdamW widens it as it reads it. Widening bf16 is exact, so the update is
// bit for bit the one from the cast, without the cast's kernel, its fp32 buffer (4 bytes
// per parameter, alive until the optimizer) and half of AdamW's gradient reads.
//
// Capture: what keeps the whole step out of one CUDA graph, each with its node and why
// (random ops, CPU tensors, dynamic shapes, ops that synchronize with the host). The
// runtime falls back to stream execution and logs these.
#ifndef MAGI_BACKEND_NCCL_STREAM_STREAM_PLAN_H_
#define MAGI_BACKEND_NCCL_STREAM_STREAM_PLAN_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

struct StreamPlanOptions {
  bool skip_single_rank_collectives = true;
  bool donate_optimizer_state = true;  // the caller lets magi::adamw (either form) overwrite its state
  bool defer_grad_casts = true;        // see "Deferred gradient casts" above
  bool overlap_optimizer = false;      // see "Optimizer overlap" above
  int64_t min_overlap_batch_elements = int64_t{1} << 22;
};

struct CommStream {
  std::string group;
  int annotated_stream = 0;
};

struct CollectivePlan {
  int start = -1;   // node index of the start
  int wait = -1;    // node index of its wait
  int stream = -1;  // communication stream id (1..K); -1 when skipped
  bool skipped = false;
};

struct AdamWBatch {
  std::vector<int> nodes;  // magi::adamw (or, all of them, magi::adamw_split) node indices, program order
  // On the compute stream: the last member's index; the batch runs when it is reached.
  // On the optimizer stream: the node after which it is launched there (any node).
  int run_at = -1;
  bool in_place = false;
  bool on_optimizer_stream = false;
};

struct CaptureBlocker {
  int node = -1;  // -1: not one node (an input)
  std::string reason;
};

struct StreamPlan {
  std::vector<int> stream_of_node;        // per node: 0 (compute) or the collective's stream
  std::vector<CommStream> comm_streams;   // index k-1 describes stream k
  std::vector<CollectivePlan> collectives;  // in start order
  absl::flat_hash_map<int, int> collective_of_node;  // start or wait index -> collectives index
  std::vector<AdamWBatch> adamw_batches;
  std::vector<int> adamw_batch_of_node;  // -1 or the batch index
  // Optimizer overlap: per node, the batches launched on the optimizer stream after it.
  std::vector<std::vector<int>> optimizer_batches_after;
  int overlapped_batches = 0;  // batches on the optimizer stream (0: no optimizer stream)
  // Values released after each node (program order), with the collective rule above;
  // graph outputs are never released, inputs are (the caller owns them).
  std::vector<std::vector<const Value*>> release_after;
  // Values released after the last node, once the compute stream has joined the optimizer
  // stream (what optimizer-stream batches read).
  std::vector<const Value*> release_at_end;
  std::vector<CaptureBlocker> capture_blockers;
  // Deferred gradient casts: the aten::_to_copy nodes not run, and every value that holds
  // the bf16 tensor in place of its fp32 type (those casts' results and the skipped
  // collectives' results they flow to).
  std::vector<int> deferred_casts;
  std::vector<const Value*> bf16_for_f32;

  bool capturable() const { return capture_blockers.empty(); }
  // "graph @g: 3 cross-stream edges, ..." for logs and tests.
  std::string Summary() const;
};

absl::StatusOr<StreamPlan> BuildStreamPlan(const Module& module, const Graph& graph,
                                           const StreamPlanOptions& options = {});

}  // namespace magi

#endif  // MAGI_BACKEND_NCCL_STREAM_STREAM_PLAN_H_
