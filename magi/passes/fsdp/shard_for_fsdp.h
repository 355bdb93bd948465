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
//  - per group, after its last gradient is produced: the gradients cast to
//    `reduce_dtype`, padded to whole shards and reduce-scattered (average) in one
//    bucket; the result cast back to the shard's dtype;
//  - with `optimizer`, AdamW on the shards in the same graph (phase opt: one magi::adamw
//    per parameter, appended at the end of the graph; see magi/ir/magi_ops.h), with the
//    per-step scalars as inputs (`adamw.decay` = 1 - lr * weight_decay,
//    `adamw.step_size` = lr / (1 - beta1^t), `adamw.bc2_sqrt` = sqrt(1 - beta2^t)) and
//    the moments as inputs `P.exp_avg`, `P.exp_avg_sq`; outputs become `loss`, then per
//    parameter `P.shard`, `P.exp_avg`, `P.exp_avg_sq`. Without it, `P.grad.shard`.
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
};

struct AdamWHyperparameters {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct FsdpPlan {
  std::string process_group = "dp";  // created with `world_size` if the module lacks it
  std::string mesh_axis = "dp";
  int64_t world_size = 1;
  std::vector<FsdpGroupPlan> groups;
  std::optional<DType> master_dtype;  // dtype of the shards (default: the parameter's)
  std::optional<DType> reduce_dtype;  // dtype of gradient reduction (default: the gradient's)
  bool optimizer = true;              // append AdamW
  AdamWHyperparameters adamw;
};

// Rows of dim 0 each rank holds for a parameter of `dim0` rows.
inline int64_t ShardRows(int64_t dim0, int64_t world_size) { return (dim0 + world_size - 1) / world_size; }

absl::Status ShardForFsdp(Module& module, Graph& graph, const FsdpPlan& plan);

}  // namespace magi

#endif  // MAGI_PASSES_FSDP_SHARD_FOR_FSDP_H_
