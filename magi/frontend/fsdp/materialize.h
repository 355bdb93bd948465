// Sharded materialization of a model built on the meta device (FSDP2's
// `fully_shard` on meta, then `to_empty` + `reset_parameters`, without ever holding the
// whole model): each parameter in turn is initialized at full size by its module
// (magi/module_api/reset_parameters.h), this rank's rows are kept as an fp32 shard and the
// full tensor is freed, so the transient cost is one parameter, never the model.
// Buffers (RoPE tables, running statistics) are materialized whole: every rank keeps them.
//
//   absl::StatusOr<MaterializedShards> m = MaterializeShards(*model, plan, shard_rank, /*seed=*/0);
//
// Deterministic per seed: the default CPU generator is seeded with `seed` for the
// duration (its previous state is restored afterwards), so the shards are the rows of
// the weights `torch::manual_seed(seed)` followed by a construction on the CPU gives, for
// any world size.
#ifndef MAGI_FRONTEND_FSDP_MATERIALIZE_H_
#define MAGI_FRONTEND_FSDP_MATERIALIZE_H_

#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {

struct MaterializedShards {
  std::map<std::string, at::Tensor> shards;  // "<param>": this rank's rows, fp32, padded
  std::map<std::string, std::vector<int64_t>> full_shapes;
  std::map<std::string, at::Tensor> buffers;  // "<buffer>": whole
};

// True when any parameter or buffer of `root` is on the meta device.
bool IsOnMeta(torch::nn::Module& root);

// Materializes the planned parameters of `root` (sharded over plan.world_size ranks,
// this rank holding shard `shard_rank`) and all its buffers on the CPU. Errors:
// FailedPrecondition naming a module that has parameters or buffers but does not
// implement ResetsParameters; ResourceExhausted naming the tensor when memory runs out;
// Internal with LibTorch's message for any other failure.
absl::StatusOr<MaterializedShards> MaterializeShards(torch::nn::Module& root, const FsdpPlan& plan,
                                                     int64_t shard_rank, uint64_t seed);

// Rows [rank * R, (rank + 1) * R) of `full`'s dim 0 as fp32, R = ShardRows(dim0, world),
// zero-padded past the end (the same values as checkpoint.h's ShardOf, without a padded
// copy of the whole tensor).
at::Tensor ShardRowsOf(const at::Tensor& full, int64_t world, int64_t rank);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_MATERIALIZE_H_
