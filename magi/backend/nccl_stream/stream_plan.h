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
// nothing else reads them after the update.
//
// Deferred gradient casts (mixed precision, groups of one rank): a bf16 -> fp32
// aten::_to_copy whose result only feeds skipped reduce-scatters (or all-reduces), whose
// results in turn are only the gradient operand of batched magi::adamw nodes on CUDA, is
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
  bool donate_optimizer_state = true;  // the caller lets magi::adamw overwrite p, m, v
  bool defer_grad_casts = true;        // see "Deferred gradient casts" above
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
  std::vector<int> nodes;  // magi::adamw node indices, program order
  int run_at = -1;         // the last member's index: the batch runs when it is reached
  bool in_place = false;
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
  // Values released after each node (program order), with the collective rule above;
  // graph outputs are never released, inputs are (the caller owns them).
  std::vector<std::vector<const Value*>> release_after;
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
