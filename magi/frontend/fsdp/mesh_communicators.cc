#include "magi/frontend/fsdp/mesh_communicators.h"

#include "absl/strings/str_cat.h"

namespace magi {

absl::StatusOr<MeshCommunicators> CreateMeshCommunicators(const DeviceMesh& mesh, const std::string& name,
                                                          const CommunicatorOptions& options) {
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
  return communicators;
}

}  // namespace magi
