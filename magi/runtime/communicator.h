// The collective-communication interface the runtimes execute magi:: collectives with.
//
// One Communicator serves one process group (one mesh axis). Start() enqueues a
// collective and returns at once; Wait() on its handle blocks until the result is
// there. Collectives run in the order they are started, so every rank must start the
// same collectives in the same order (Magi's schedules guarantee it). A failure
// (a dead or hung peer, a timeout) is a Status naming the rank and the collective; after
// one, the communicator refuses further work instead of hanging.
#ifndef MAGI_RUNTIME_COMMUNICATOR_H_
#define MAGI_RUNTIME_COMMUNICATOR_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/collectives.h"

namespace magi {

class CollectiveHandle {
 public:
  virtual ~CollectiveHandle() = default;
  // The results, one per input (see magi/ir/collectives.h for shapes).
  virtual absl::StatusOr<std::vector<at::Tensor>> Wait() = 0;
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

}  // namespace magi

#endif  // MAGI_RUNTIME_COMMUNICATOR_H_
