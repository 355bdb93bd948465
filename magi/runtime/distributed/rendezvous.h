// Rendezvous from the environment the common launchers set up.
//
//  - torchrun / the local launcher: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
//    Under torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True, its static
//    rendezvous) the agent of node 0 already hosts the store on MASTER_ADDR:MASTER_PORT:
//    every rank connects as a client under the prefix /worker/attempt_<TORCHELASTIC_RESTART_COUNT>,
//    as PyTorch's own env:// rendezvous does, so a restarted attempt starts clean.
//  - SLURM (srun), when RANK is not set: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the
//    master is MASTER_ADDR if set, else the first host of SLURM_JOB_NODELIST (or
//    SLURM_NODELIST); the port MASTER_PORT if set, else 15000 + the last four digits of
//    SLURM_JOB_ID (PyTorch Lightning's choice, so two jobs on one node do not collide).
//  - nothing set: a single process, rank 0 of 1.
// Otherwise rank 0 hosts LibTorch's c10d::TCPStore on MASTER_ADDR:MASTER_PORT and the
// others connect to it. Communicators bootstrap through it.
#ifndef MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_
#define MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace magi {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True): connect as a client.
  bool use_agent_store = false;
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT
  std::string source = "single";  // where the values came from: "env", "slurm" or "single"
};

// Reads the variables; InvalidArgument naming the variable when one is malformed or
// missing (SLURM_NTASKS with SLURM_PROCID).
absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment();

// The first host of a SLURM host list: "node[01-04,07],gpu5" -> "node01",
// "rack[1-2]-n[3-4]" -> "rack1-n3", "a,b" -> "a". InvalidArgument on unbalanced brackets.
absl::StatusOr<std::string> FirstHostOfSlurmNodeList(absl::string_view node_list);

// Connects to (rank 0, unless the agent hosts it: starts) the store; DeadlineExceeded after `timeout`.
// A lone process (source "single", world size 1) gets an in-memory store: nobody else
// connects, and a fixed default port clashed between such processes running side by side.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const DistributedEnv& env,
                                                             std::chrono::milliseconds timeout);

}  // namespace magi

#endif  // MAGI_RUNTIME_DISTRIBUTED_RENDEZVOUS_H_
