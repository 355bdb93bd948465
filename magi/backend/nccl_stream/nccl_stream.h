// The "nccl_stream" backend: runs a compiled step on one CUDA device per rank.
//
// What it does (the schedule itself is stream_plan.h, decided once and tested on CPU):
//  - ATen ops through the dispatcher on the compute stream (the caller's current stream),
//    in program order; magi::call through the callee partitions' executables;
//  - each collective on its communication stream (one NCCL communicator per stream, split
//    from the bound one), as ONE grouped NCCL call per bucket whose results are views of
//    one flat output buffer (no per-tensor copy-out), ordered by CUDA events: no host
//    synchronization inside the step; groups of one rank skip the collective;
//  - every magi::adamw of the step as one multi-tensor kernel (fused_adamw.h), in place on
//    the donated parameter shards and moments;
//  - optionally the whole step as ONE CUDA graph: after `graph_warmup` stream-mode runs the
//    step is captured, and later runs copy changed inputs into the captured ones and replay
//    it, so a step costs one graph launch on the host. If something in the step cannot be
//    captured (stream_plan.h lists why, or the capture itself fails) it logs which node
//    and why to stderr and stays in stream mode.
//  - after each step, waits for the device with the communicators' timeout, aborting them
//    and failing (naming the rank) if a peer died or hung.
// Options (registry spec "nccl_stream{...}"):
//   cuda_graph=true|false (default false), graph_warmup=N (2), skip_single_rank=true|false
//   (true), donate=true|false (true: magi::adamw updates its state inputs in place),
//   sync_each_step=true|false (true), fuse_grad_cast=true|false (true: a one-rank
//   mixed-precision step's bf16 -> fp32 gradient casts are read by the multi-tensor AdamW
//   instead of run; stream_plan.h, "Deferred gradient casts"), overlap_optimizer=true|false
//   (false; true: the AdamW batches run on an optimizer stream during the backward, as
//   soon as their gradients exist, instead of after it on the compute stream;
//   stream_plan.h, "Optimizer overlap"), overlap_min_elements=N (4194304: the parameters an overlapped batch holds at
//   least before it closes at a later ready point), graph_memset_kernels=true|false (true:
//   the captured graph's memset nodes of up to 4 KiB, cuBLAS's workspace resets before its
//   GEMMs, run as kernel nodes: ~1 us less device time per node and a graph launch without
//   their ~2 us of host time each; the 953M step's wall time did not change, its host time per
//   step went 0.5 -> 0.0 ms; graph_memsets.h. Where LibTorch's CUDAGraph can hand out the
//   captured graph, magi/compat/cuda_graph.h; ignored elsewhere).
// Donation: with donate=true, Run overwrites the parameter-shard and moment inputs of
// magi::adamw with their new values and returns those same tensors, and runs an op that
// the memory plan writes over a donated input (InPlaceOperandOfResult: a KV cache's
// aten::scatter.src whose output aliases the cache) as its in-place variant. In graph mode, the
// outputs are the captured graph's buffers, overwritten by the next Run.
// RunStats::peak_live_bytes is the CUDA caching allocator's peak of allocated bytes (what
// torch.cuda.max_memory_allocated reports), counted since the caller last reset the
// allocator's peak statistics; a CUDA graph's memory is allocated while it is captured.
// That peak also holds PyTorch's GEMM workspaces (32 MiB per cuBLAS handle and stream on an
// H200), which no plan counts: LibraryDeviceBytesHeld says what they hold, and
// LibraryDeviceBytesRunsAdd what this executable's runs will add (the caller's stream's and
// the capture stream's; magi/compat/gemm_workspace.h).
// Where it cannot run: tensors not on CUDA in collectives, communicators that are not
// NCCL: those fail with a Status naming the node.
#ifndef MAGI_BACKEND_NCCL_STREAM_NCCL_STREAM_H_
#define MAGI_BACKEND_NCCL_STREAM_NCCL_STREAM_H_

#include "magi/backend/backend.h"
#include "magi/registry/registry.h"

namespace magi {

struct NcclStreamOptions {
  bool cuda_graph = false;
  int graph_warmup = 2;
  bool skip_single_rank = true;
  bool donate = true;
  bool sync_each_step = true;
  bool fuse_grad_cast = true;
  bool overlap_optimizer = false;
  int64_t overlap_min_elements = int64_t{1} << 22;
  bool graph_memset_kernels = true;

  static absl::StatusOr<NcclStreamOptions> FromComponentOptions(const ComponentOptions& options);
};

class NcclStreamBackend : public Backend {
 public:
  explicit NcclStreamBackend(NcclStreamOptions options) : options_(options) {}
  absl::string_view name() const override { return "nccl_stream"; }
  Capability GetCapability(const Module& module, const Graph& graph) const override;
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                      const CompileContext& context) const override;

 private:
  NcclStreamOptions options_;
};

}  // namespace magi

#endif  // MAGI_BACKEND_NCCL_STREAM_NCCL_STREAM_H_
