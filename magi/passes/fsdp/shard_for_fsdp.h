// Rewrites a captured training step into one FSDP step for one rank.
//
// Input: the unsharded step as capture writes it (parameters as inputs, `<param>.grad`
// outputs, nodes annotated with phase fwd/bwd). Output, in the same graph:
//  - every planned parameter P becomes an input `P.shard` holding this rank's rows of
//    P's dim 0 (ceil(dim0 / world) rows, the last ranks padded with zeros);
//  - per group, before the group's first forward use: one bucketed all-gather of the
//    group's shards (cast to `param_dtype` first when mixed precision asks), then a
//    slice back to the unpadded size; with `reshard_after_forward` a second gather
//    before the first backward use, else backward reuses the forward one;
//  - FSDP2's reshard_after_forward=<int> (`post_forward_size` K): right after the
//    forward gather each rank keeps only its 1/K of the gathered tensors
//    (magi::local_shard over the post-forward group, PostForwardGroupName: K consecutive
//    ranks of the shard group), the whole tensors die after their last forward use, and
//    backward all-gathers the pieces over those K ranks instead of the whole group;
//  - CPU offload (`cpu_offload`, FSDP2's CPUOffloadPolicy): the shard inputs (fp32
//    masters), the AdamW moments and scalars are on the host (cpu); every gather reads a
//    copy of its shards on the parameters' device (aten::_to_copy, with the cast); each
//    reduced gradient shard is copied to the host right after its reduce-scatter; AdamW
//    runs there on host tensors, and its new shards reach the device through the next
//    step's gathers (as FSDP2, which keeps sharded parameters on the host too). The
//    copies are made even when host and device are the same (a CPU run), so the graph is
//    the one a GPU runs. Clipping all-reduces its sum on the device.
//    Unaccumulated gradients (`P.grad.acc`) stay on the device.
//    Transfers are blocking; pinning the host tensors is the caller's part.
//  - per group, after its last gradient is produced: the gradients cast to
//    `reduce_dtype`, padded to whole shards and reduce-scattered (average) in one
//    bucket; the result cast back to the shard's dtype;
//  - with `optimizer`, AdamW on the shards in the same graph (phase opt: one magi::adamw
//    per parameter, appended at the end of the graph; see magi/ir/magi_ops.h), with the
//    per-step scalars as inputs (`adamw.decay` = 1 - lr * weight_decay,
//    `adamw.step_size` = lr / (1 - beta1^t), `adamw.bc2_sqrt` = sqrt(1 - beta2^t)) and
//    the moments as inputs `P.exp_avg`, `P.exp_avg_sq`; outputs become `loss`, then per
//    parameter `P.shard`, `P.exp_avg`, `P.exp_avg_sq`, each aliasing (donation, see
//    GraphOutput) the input of the same name when `donate_state`, so runtimes update the
//    state in place. Without the optimizer, `P.grad.shard`.
//  - HSDP (`replicate_size` > 1, a 2-D mesh replicate x shard): shards and gathers stay
//    within the shard group; after each group's reduce-scatter one bucketed all-reduce
//    (average) over the replicate group, so every replica holds the global mean.
//  - gradient accumulation (FSDP2's set_requires_gradient_sync): with `gradient_sync`
//    off the graph reduces nothing and steps nothing: its outputs are `loss` and per
//    parameter `P.grad.acc`, the unsharded local gradient (in `reduce_dtype`) plus the
//    input `P.grad.acc` when `accumulated_gradient_input`. A synchronizing graph with
//    `accumulated_gradient_input` adds that input before the reduce-scatter, so a step
//    of N micro-batches reduce-scatters once; `gradient_divisor` (N) divides the reduced
//    shards (the mean over micro-batches, as eager's loss / N per micro-batch).
//  - `clip_grad_norm` > 0: torch.nn.utils.clip_grad_norm_ on the full gradient: the sum of
//    squares of this rank's gradient shards, all-reduced (sum) over the shard group, its
//    square root is the total norm (output `grad_norm`), and every shard is multiplied
//    by min(1, max_norm / (norm + 1e-6)) before AdamW.
// Collectives of all groups sit in the one graph, so later passes can move them across
// layer boundaries. It does not reorder anything else. No LibTorch.
#ifndef MAGI_PASSES_FSDP_SHARD_FOR_FSDP_H_
#define MAGI_PASSES_FSDP_SHARD_FOR_FSDP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "magi/ir/module.h"

namespace magi {

struct FsdpGroupPlan {
  std::string name;                 // the module path of the FullyShard call ("" = root)
  std::vector<std::string> params;  // fully qualified parameter names
  bool reshard_after_forward = true;
  // FSDP2's reshard_after_forward=<int> (with reshard_after_forward): reshard to this
  // many ranks after forward instead of the whole shard group (see above); a divisor of
  // world_size other than 1 and world_size. 0: the whole shard group.
  int64_t post_forward_size = 0;
};

struct AdamWHyperparameters {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct FsdpPlan {
  std::string process_group = "dp";  // the shard group; created with `world_size` if the module lacks it
  std::string mesh_axis = "dp";
  int64_t world_size = 1;  // ranks of the shard group (a 2-D mesh: its shard axis)
  // HSDP: the replicate group (the mesh's other axis); 1: no replication.
  std::string replicate_group = "replicate";
  std::string replicate_axis = "replicate";
  int64_t replicate_size = 1;
  std::vector<FsdpGroupPlan> groups;
  std::optional<DType> master_dtype;  // dtype of the shards (default: the parameter's)
  std::optional<DType> reduce_dtype;  // dtype of gradient reduction (default: the gradient's)
  bool optimizer = true;              // append AdamW
  AdamWHyperparameters adamw;
  // Gradient accumulation over micro-batches (see above).
  bool gradient_sync = true;
  bool accumulated_gradient_input = false;
  int64_t gradient_divisor = 1;
  double clip_grad_norm = 0;  // > 0: clip the global gradient norm to this (needs the optimizer)
  // Donation: every state output (`P.shard`, `P.exp_avg`, `P.exp_avg_sq`, `P.grad.acc`)
  // aliases its input (GraphOutput::aliases), so AdamW may update it in place.
  bool donate_state = true;
  // FSDP2's CPUOffloadPolicy: shards, moments and AdamW on the host (see above).
  bool cpu_offload = false;
};

// The process group a group resharded to `size` ranks after forward gathers backward's
// copy over: "<shard group>.post_forward<size>", the `size` consecutive ranks of the
// shard group that hold one piece each (rank r is rank r % size of the group of ranks
// size * (r / size) ...). ShardForFsdp adds it to the module when it is used.
std::string PostForwardGroupName(const std::string& shard_group, int64_t size);

// Rows of dim 0 each rank holds for a parameter of `dim0` rows.
inline int64_t ShardRows(int64_t dim0, int64_t world_size) { return (dim0 + world_size - 1) / world_size; }

absl::Status ShardForFsdp(Module& module, Graph& graph, const FsdpPlan& plan);

}  // namespace magi

#endif  // MAGI_PASSES_FSDP_SHARD_FOR_FSDP_H_
