// FSDP2-style sharding annotations: DeviceMesh, FullyShard, and the IR-level plan they
// define (PlanFromFullyShard), which the compile driver's shard stage applies.
//
//   magi::DeviceMesh mesh = *magi::DeviceMesh::Create({world_size}, {"dp"}, rank);
//   for (auto& layer : model->layers) magi::FullyShard(*layer, mesh);
//   magi::FullyShard(*model, mesh);                        // the root takes the rest
//   absl::StatusOr<magi::FsdpPlan> plan = magi::PlanFromFullyShard(*model);
//
// Semantics follow FSDP2: each FullyShard call is one communication group; parameters
// are sharded on dim 0 across the mesh (uneven sizes padded); reshard_after_forward
// frees the gathered parameters after forward and gathers them again in backward;
// mixed precision gathers and computes in param_dtype and reduces in reduce_dtype,
// with fp32 master shards and optimizer state.
#ifndef MAGI_FRONTEND_FSDP_FULLY_SHARD_H_
#define MAGI_FRONTEND_FSDP_FULLY_SHARD_H_

#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/types.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {

// Ranks arranged in a grid with named axes. 1-D today; the shape/axis form is what
// 2-D HSDP meshes (replicate x shard) will use.
class DeviceMesh {
 public:
  static absl::StatusOr<DeviceMesh> Create(std::vector<int64_t> shape, std::vector<std::string> axis_names, int rank);
  int64_t size() const;  // all ranks
  int64_t axis_size(size_t axis) const { return shape_.at(axis); }
  const std::string& axis_name(size_t axis) const { return axis_names_.at(axis); }
  size_t num_axes() const { return shape_.size(); }
  int rank() const { return rank_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  int rank_ = 0;
};

struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype;   // gathers and compute (the module must be built in it)
  std::optional<DType> reduce_dtype;  // gradient reduce-scatter
};

struct FullyShardOptions {
  bool reshard_after_forward = true;
  MixedPrecisionPolicy mixed_precision;
};

// Marks `module` (and the parameters of its subtree not claimed by a nested
// FullyShard) as one FSDP group. Call on submodules first, then on the root.
void FullyShard(torch::nn::Module& module, const DeviceMesh& mesh, const FullyShardOptions& options = {});

// The groups FullyShard defined under `root`, innermost first, as an IR-level plan.
absl::StatusOr<FsdpPlan> PlanFromFullyShard(torch::nn::Module& root);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_FULLY_SHARD_H_
