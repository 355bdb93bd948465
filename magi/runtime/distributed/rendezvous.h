// Rendezvous from the torchrun / Slurm-style environment.
//
//   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
// (all unset: a single process, rank 0 of 1). Rank 0 hosts LibTorch's c10d::TCPStore on
// MASTER_ADDR:MASTER_PORT; the others connect to it. Communicators bootstrap through it.
#ifndef MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_
#define MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace magi {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Reads the variables; InvalidArgument naming the variable when one is malformed.
absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment();

// Connects to (rank 0: starts) the store; DeadlineExceeded after `timeout`.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const DistributedEnv& env,
                                                             std::chrono::milliseconds timeout);

}  // namespace magi

#endif  // MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_
