// A Communicator over NCCL for CUDA tensors.
//
// Rank 0 creates the NCCL unique id and publishes it through the c10d::Store; every rank
// then joins with ncclCommInitRank on its device. Collectives run on a dedicated
// communication stream that first waits for the compute stream (an event), so kernels
// queued before the start overlap with the transfer; Wait() makes the compute stream wait
// for the collective and, on the host, polls its completion against `timeout`, aborting
// the communicator (ncclCommAbort) and returning DeadlineExceeded naming the rank and
// the collective if a peer never arrives. Bucketed collectives are one NCCL group.
// Tensors touched by the communication stream are recorded with the caching allocator.
#ifndef MAGI_RUNTIME_NCCL_NCCL_COMMUNICATOR_H_
#define MAGI_RUNTIME_NCCL_NCCL_COMMUNICATOR_H_

#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/comm/nccl.h"

namespace magi {

// Returns an NcclCommunicator (magi/comm/nccl.h) for `size` ranks on CUDA device
// `device_index`; the registry's "nccl" entry calls it with CommunicatorOptions.
absl::StatusOr<std::shared_ptr<Communicator>> CreateNcclCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                                     int size, const std::string& group_name,
                                                                     int device_index,
                                                                     std::chrono::milliseconds timeout);

}  // namespace magi

#endif  // MAGI_RUNTIME_NCCL_NCCL_COMMUNICATOR_H_
