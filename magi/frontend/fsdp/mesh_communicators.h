// One communicator per axis of a DeviceMesh for this rank (PyTorch's DeviceMesh builds
// the same process groups): on a 2-D {replicate, shard} mesh of 4 ranks, rank 3 gets a
// shard communicator over ranks {2, 3} and a replicate communicator over {1, 3}. With
// post-forward sizes {2} on a 1-D mesh of 4, rank 3 also gets one over {2, 3}
// ("dp.post_forward2"), for FullyShard(reshard_after_forward=2).
//
//   MeshCommunicators c = *CreateMeshCommunicators(mesh, "gloo", options);  // options.store, .timeout
//   auto trainer = FsdpTrainer::Create(*model, loss_fn, batch, c, adamw);
#ifndef MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_
#define MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/frontend/fsdp/fully_shard.h"

namespace magi {

using MeshCommunicators = std::map<std::string, std::shared_ptr<Communicator>>;

// Creates the communicator registered as `name` ("gloo", "nccl") for each axis of
// `mesh`, keyed by axis name. `options` supplies the store, device and timeout; rank,
// size and group name are set per axis (group names: DeviceMesh::GroupName, so the
// groups' store entries never collide). Every rank of the mesh must call it, with axes
// in the same order.
// With `post_forward_sizes`, CreatePostForwardCommunicators' too.
absl::StatusOr<MeshCommunicators> CreateMeshCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                          const CommunicatorOptions& options,
                                                          const std::vector<int>& post_forward_sizes = {});

// For each K of `post_forward_sizes`, the communicator of this rank's post-forward group
// (FullyShard's reshard_after_forward=K): the K consecutive ranks of its shard group that
// rank r shares, rank r % K in it; keyed by PostForwardGroupName(shard axis name, K). Its
// store entries are keyed "<shard group>.post_forward<K>.<r / K>". Every rank of the mesh
// calls it with the same sizes. InvalidArgument when K does not divide the shard axis or
// is 1 or its size.
absl::StatusOr<MeshCommunicators> CreatePostForwardCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                                 const CommunicatorOptions& options,
                                                                 const std::vector<int>& post_forward_sizes);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_
