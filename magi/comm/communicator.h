// The collective-communication interface backends execute magi:: collectives with, and
// the registry of communicator implementations (kind "communicator": "gloo" for CPU
// tensors, "nccl" for CUDA tensors; magi/runtime/* implement and register them).
//
//   CommunicatorOptions options{store, rank, world_size, "dp", /*device_index=*/local_rank, timeout};
//   absl::StatusOr<std::shared_ptr<Communicator>> c = CreateCommunicator("nccl", options);
//
// One Communicator serves one process group (one mesh axis). Start() enqueues a
// collective and returns at once; Wait() on its handle blocks until the result is
// there. Collectives run in the order they are started, so every rank must start the
// same collectives in the same order (Magi's schedules guarantee it). A failure
// (a dead or hung peer, a timeout) is a Status naming the rank and the collective; after
// one, the communicator refuses further work instead of hanging.
#ifndef MAGI_COMM_COMMUNICATOR_H_
#define MAGI_COMM_COMMUNICATOR_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/collectives.h"

namespace magi {

// When a collective ran, as the communicator saw it (steady clock).
struct CollectiveTiming {
  // When it could start: issued, and the communicator done with the collectives issued
  // before it (they run one at a time, in order). Time spent waiting for a peer rank to
  // arrive counts as the collective's, as it does in a step.
  std::chrono::steady_clock::time_point ready;
  std::chrono::steady_clock::time_point done;  // its results complete
};

class CollectiveHandle {
 public:
  virtual ~CollectiveHandle() = default;
  // The results, one per input (see magi/ir/collectives.h for shapes).
  virtual absl::StatusOr<std::vector<at::Tensor>> Wait() = 0;
  // After a successful Wait, when the collective ran, where the communicator knows it on
  // the host (Gloo runs collectives on a worker thread); nullopt otherwise (NCCL: its
  // kernels' times are CUDA events of the stream that runs them).
  virtual std::optional<CollectiveTiming> timing() const { return std::nullopt; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `reduce_op` is "sum" or "avg" for reductions, ignored otherwise.
  virtual absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                                  const std::string& reduce_op) = 0;
};

// What every communicator implementation is created from.
struct CommunicatorOptions {
  c10::intrusive_ptr<c10d::Store> store;  // the rendezvous store (never null)
  int rank = 0;
  int size = 1;
  std::string group_name = "dp";  // keys the store entries, so several groups can share one store
  int device_index = 0;           // the CUDA device of this rank (ignored on CPU)
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // Deterministic mode (docs/deterministic.md): the communicator must reduce in one fixed
  // order run after run. NCCL pins its algorithm and protocol before it starts (and fails
  // on a conflicting environment); Gloo's ring allreduce is fixed in every mode.
  bool deterministic = false;
};

// A communicator implementation, registered by name ("gloo", "nccl").
class CommunicatorProvider {
 public:
  static constexpr absl::string_view kRegistryKind = "communicator";
  virtual ~CommunicatorProvider() = default;
  virtual absl::StatusOr<std::shared_ptr<Communicator>> Create(const CommunicatorOptions& options) const = 0;
};

// Creates the communicator registered as `name`; NotFound lists the registered names
// (a binary links the implementations it wants: //magi/runtime/gloo, //magi/runtime/nccl).
absl::StatusOr<std::shared_ptr<Communicator>> CreateCommunicator(absl::string_view name,
                                                                 const CommunicatorOptions& options);

// The communicator for tensors on `device_type` ("cpu" -> "gloo", "cuda" -> "nccl").
absl::StatusOr<std::string> DefaultCommunicatorFor(absl::string_view device_type);

}  // namespace magi

#endif  // MAGI_COMM_COMMUNICATOR_H_
