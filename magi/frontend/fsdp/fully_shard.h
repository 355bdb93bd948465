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
// frees the gathered parameters after forward and gathers them again in backward (true),
// keeps them (false), or keeps 1/K of them and gathers over K ranks in backward (an int K:
// FSDP2's reshard to a smaller world, e.g. the ranks of one node; the trainer needs the
// communicators CreateMeshCommunicators makes for K); cpu_offload keeps the master shards
// and AdamW's state on the host and runs AdamW there (FSDP2's CPUOffloadPolicy);
// mixed precision gathers and computes in param_dtype and reduces in reduce_dtype,
// with fp32 master shards and optimizer state. A 2-D mesh ({replicate, shard}, FSDP2's
// HSDP) shards over its last axis and replicates over its first: gradients are
// reduce-scattered within the shard group, then all-reduced across the replicas.
//
//   auto mesh = *magi::DeviceMesh::Create({2, 2}, {"replicate", "shard"}, rank);   // 4 ranks
#ifndef MAGI_FRONTEND_FSDP_FULLY_SHARD_H_
#define MAGI_FRONTEND_FSDP_FULLY_SHARD_H_

#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/ir/types.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {

// Ranks arranged in a grid with named axes, row-major (rank = coordinate 0 * shape[1] +
// coordinate 1): 1-D, or 2-D {replicate, shard} for HSDP.
class DeviceMesh {
 public:
  // InvalidArgument: no axes, a name per axis missing or repeated, a size < 1, a rank
  // outside the mesh; Unimplemented: more than 2 axes.
  static absl::StatusOr<DeviceMesh> Create(std::vector<int64_t> shape, std::vector<std::string> axis_names, int rank);
  int64_t size() const;  // all ranks
  int64_t axis_size(size_t axis) const { return shape_.at(axis); }
  const std::string& axis_name(size_t axis) const { return axis_names_.at(axis); }
  size_t num_axes() const { return shape_.size(); }
  int rank() const { return rank_; }
  // This rank's position along `axis` (its rank within that axis' group).
  int64_t coordinate(size_t axis) const;
  // The global ranks of this rank's group along `axis` (the others' coordinates fixed), in order.
  std::vector<int> GroupRanks(size_t axis) const;
  // A name for this rank's group along `axis`, the same on every member and different
  // for every other group: "<axis name>.<the other coordinates>" ("shard.1").
  std::string GroupName(size_t axis) const;
  bool operator==(const DeviceMesh& other) const {
    return shape_ == other.shape_ && axis_names_ == other.axis_names_;
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  int rank_ = 0;
};

struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype;   // gathers and compute (the module must be built in it)
  std::optional<DType> reduce_dtype;  // gradient reduce-scatter
};

// FSDP2's reshard_after_forward, a bool or an int:
//   options.reshard_after_forward = false;  // keep the gathered parameters until backward
//   options.reshard_after_forward = 2;      // keep half of them; backward gathers over 2 ranks
class ReshardAfterForwardOption {
 public:
  ReshardAfterForwardOption(bool reshard = true) : reshard_(reshard) {}  // NOLINT: FSDP2 takes True/False
  ReshardAfterForwardOption(int size) : reshard_(true), size_(size) {}   // NOLINT: and ints
  // "true", "false" or a positive integer (a flag's text); InvalidArgument otherwise.
  static absl::StatusOr<ReshardAfterForwardOption> Parse(absl::string_view text);

  bool reshards() const { return reshard_; }
  // The world size to reshard to; nullopt for true and false.
  std::optional<int> size() const { return size_; }
  std::string ToString() const;

 private:
  bool reshard_ = true;
  std::optional<int> size_;
};

struct FullyShardOptions {
  ReshardAfterForwardOption reshard_after_forward = true;
  MixedPrecisionPolicy mixed_precision;
  // FSDP2's offload_policy=CPUOffloadPolicy(): master shards, AdamW moments and AdamW on
  // the host (pinned where CUDA is present); each gather copies the shards to the device,
  // each reduced gradient shard is copied to the host. All groups of a model or none.
  bool cpu_offload = false;
};

// Marks `module` (and the parameters of its subtree not claimed by a nested
// FullyShard) as one FSDP group. Call on submodules first, then on the root.
void FullyShard(torch::nn::Module& module, const DeviceMesh& mesh, const FullyShardOptions& options = {});

// The groups FullyShard defined under `root`, innermost first, as an IR-level plan.
// InvalidArgument naming the module when its mesh is not the root's, its
// reshard_after_forward=K does not divide the shard axis (or is 1 or its size), or its
// cpu_offload differs from the root's.
absl::StatusOr<FsdpPlan> PlanFromFullyShard(torch::nn::Module& root);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_FULLY_SHARD_H_
