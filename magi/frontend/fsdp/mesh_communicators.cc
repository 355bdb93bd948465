#include "magi/frontend/fsdp/mesh_communicators.h"

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {

absl::StatusOr<MeshCommunicators> CreateMeshCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                          const CommunicatorOptions& options,
                                                          const std::vector<int>& post_forward_sizes) {
  MeshCommunicators communicators;
  for (size_t axis = 0; axis < mesh.num_axes(); ++axis) {
    CommunicatorOptions axis_options = options;
    axis_options.rank = static_cast<int>(mesh.coordinate(axis));
    axis_options.size = static_cast<int>(mesh.axis_size(axis));
    axis_options.group_name = mesh.GroupName(axis);
    absl::StatusOr<std::shared_ptr<Communicator>> created = CreateCommunicator(name, axis_options);
    if (!created.ok()) {
      return absl::Status(created.status().code(), absl::StrCat("rank ", mesh.rank(), ": mesh axis '",
                                                                mesh.axis_name(axis), "': ", created.status().message()));
    }
    communicators[mesh.axis_name(axis)] = *std::move(created);
  }
  MAGI_ASSIGN_OR_RETURN(MeshCommunicators post_forward,
                        CreatePostForwardCommunicators(mesh, name, options, post_forward_sizes));
  communicators.merge(post_forward);
  return communicators;
}

absl::StatusOr<MeshCommunicators> CreatePostForwardCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                                 const CommunicatorOptions& options,
                                                                 const std::vector<int>& post_forward_sizes) {
  MeshCommunicators communicators;
  const size_t shard_axis = mesh.num_axes() - 1;
  const int64_t shard_size = mesh.axis_size(shard_axis);
  const int64_t coordinate = mesh.coordinate(shard_axis);
  for (int k : post_forward_sizes) {
    const std::string key = PostForwardGroupName(mesh.axis_name(shard_axis), k);
    if (k <= 1 || k >= shard_size || shard_size % k != 0) {
      return absl::InvalidArgumentError(absl::StrCat("post-forward group of ", k, " ranks: ", k,
                                                     " must divide the ", shard_size, " ranks of mesh axis '",
                                                     mesh.axis_name(shard_axis), "' and be neither 1 nor ", shard_size));
    }
    if (communicators.count(key)) continue;
    CommunicatorOptions group_options = options;
    group_options.rank = static_cast<int>(coordinate % k);
    group_options.size = k;
    group_options.group_name = absl::StrCat(mesh.GroupName(shard_axis), ".post_forward", k, ".", coordinate / k);
    absl::StatusOr<std::shared_ptr<Communicator>> created = CreateCommunicator(name, group_options);
    if (!created.ok()) {
      return absl::Status(created.status().code(), absl::StrCat("rank ", mesh.rank(), ": ", key, ": ",
                                                                created.status().message()));
    }
    communicators[key] = *std::move(created);
  }
  return communicators;
}

}  // namespace magi
