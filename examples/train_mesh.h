// examples:train's process groups: the communicator over all ranks (the losses are averaged
// on it), and the FSDP mesh's, 1-D over every rank or R x S (HSDP) with one communicator
// per axis, plus the post-forward groups reshard_after_forward=K gathers over.
//
//   absl::StatusOr<magi::examples::TrainMesh> mesh = magi::examples::CreateTrainMesh(env, spec);
//   magi::FullyShard(*model, mesh->mesh, options);
//   auto trainer = magi::FsdpTrainer::Create(..., mesh->communicators, ...);
#ifndef MAGI_EXAMPLES_TRAIN_MESH_H_
#define MAGI_EXAMPLES_TRAIN_MESH_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/frontend/fsdp/mesh_communicators.h"
#include "magi/runtime/distributed/rendezvous.h"

namespace magi::examples {

struct TrainMeshSpec {
  std::string device = "cpu";  // cpu or cuda: the default communicator's device
  std::string communicator;    // gloo, nccl, ...; "": the device's default
  std::string mesh;            // "" (1-D) or "RxS"
  ReshardAfterForwardOption reshard_after_forward;
  bool deterministic = false;
  std::chrono::seconds timeout{120};
};

struct TrainMesh {
  // The rendezvous store: rank 0's hosts the server the other ranks' communicators connect
  // through, so it lives as long as they do.
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<Communicator> all;  // every rank ("dp")
  DeviceMesh mesh;
  MeshCommunicators communicators;  // by axis name, post-forward groups included
  int shards = 1;                   // ranks on the shard axis: those that write checkpoint files
};

// Connects to the rendezvous store and creates the communicators. InvalidArgument naming the
// flag (--mesh, --communicator, --reshard_after_forward) for a spec that does not fit.
absl::StatusOr<TrainMesh> CreateTrainMesh(const DistributedEnv& env, const TrainMeshSpec& spec);

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_MESH_H_
