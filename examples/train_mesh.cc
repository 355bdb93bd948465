#include "examples/train_mesh.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace magi::examples {

absl::StatusOr<TrainMesh> CreateTrainMesh(const DistributedEnv& env, const TrainMeshSpec& spec) {
  auto store = ConnectStore(env, spec.timeout);
  if (!store.ok()) return store.status();
  std::string name = spec.communicator;
  if (name.empty()) {
    absl::StatusOr<std::string> by_device = DefaultCommunicatorFor(spec.device);
    if (!by_device.ok()) return by_device.status();
    name = *by_device;
  }
  CommunicatorOptions options;
  options.store = *store;
  options.rank = env.rank;
  options.size = env.world_size;
  options.group_name = "dp";
  options.device_index = env.local_rank;
  options.timeout = spec.timeout;
  options.deterministic = spec.deterministic;
  absl::StatusOr<std::shared_ptr<Communicator>> all = CreateCommunicator(name, options);
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrCat("--communicator=", name, ": ", all.status().message(),
                                     name == "nccl" ? " (NCCL needs a build with --config=cuda)" : ""));
  }
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create({env.world_size}, {"dp"}, env.rank);
  if (!mesh.ok()) return mesh.status();
  MeshCommunicators communicators = {{"dp", *all}};
  int shards = env.world_size;
  if (!spec.mesh.empty()) {
    std::vector<std::string> parts = absl::StrSplit(spec.mesh, 'x');
    int replicas = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &replicas) || !absl::SimpleAtoi(parts[1], &shards) ||
        replicas * shards != env.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mesh=", spec.mesh, ": expected RxS with R * S = ", env.world_size));
    }
    mesh = DeviceMesh::Create({replicas, shards}, {"replicate", "shard"}, env.rank);
    if (!mesh.ok()) return mesh.status();
    absl::StatusOr<MeshCommunicators> created = CreateMeshCommunicators(*mesh, name, options);
    if (!created.ok()) return created.status();
    communicators = *std::move(created);
  }
  if (std::optional<int> k = spec.reshard_after_forward.size()) {  // the post-forward groups backward gathers over
    absl::StatusOr<MeshCommunicators> post_forward = CreatePostForwardCommunicators(*mesh, name, options, {*k});
    if (!post_forward.ok()) {
      return absl::Status(post_forward.status().code(),
                          absl::StrCat("--reshard_after_forward=", spec.reshard_after_forward.ToString(), ": ",
                                       post_forward.status().message()));
    }
    communicators.merge(*post_forward);
  }
  return TrainMesh{*store, *all, *std::move(mesh), std::move(communicators), shards};
}

}  // namespace magi::examples
