// One communicator per axis of a DeviceMesh for this rank (PyTorch's DeviceMesh builds
// the same process groups): on a 2-D {replicate, shard} mesh of 4 ranks, rank 3 gets a
// shard communicator over ranks {2, 3} and a replicate communicator over {1, 3}.
//
//   MeshCommunicators c = *CreateMeshCommunicators(mesh, "gloo", options);  // options.store, .timeout
//   auto trainer = FsdpTrainer::Create(*model, loss_fn, batch, c, adamw);
#ifndef MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_
#define MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/backend/communicator.h"
#include "magi/frontend/fsdp/fully_shard.h"

namespace magi {

using MeshCommunicators = std::map<std::string, std::shared_ptr<Communicator>>;

// Creates the communicator registered as `name` ("gloo", "nccl") for each axis of
// `mesh`, keyed by axis name. `options` supplies the store, device and timeout; rank,
// size and group name are set per axis (group names: DeviceMesh::GroupName, so the
// groups' store entries never collide). Every rank of the mesh must call it, with axes
// in the same order.
absl::StatusOr<MeshCommunicators> CreateMeshCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                          const CommunicatorOptions& options);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_MESH_COMMUNICATORS_H_
