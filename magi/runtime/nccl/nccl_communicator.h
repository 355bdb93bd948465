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
#include "magi/backend/communicator.h"

namespace magi {

// What runtimes that drive NCCL themselves (the nccl_stream backend) need beyond the
// Communicator interface: the communicator, its device and timeout, and the failure
// handling every user of the communicator shares.
class NcclCommunicator : public Communicator {
 public:
  virtual ncclComm_t comm() const = 0;
  virtual int device() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // Aborts the communicator (a peer failed or timed out); every later use fails.
  virtual void Abort() = 0;
  virtual bool aborted() const = 0;
};

// NCCL's type for tensors of `type`; Unimplemented for types NCCL cannot reduce.
absl::StatusOr<ncclDataType_t> NcclDataType(at::ScalarType type);
// NCCL's reduction for Magi's reduce_op names ("sum", "avg", "max", "min").
absl::StatusOr<ncclRedOp_t> NcclReduceOp(absl::string_view reduce_op);

absl::StatusOr<std::shared_ptr<Communicator>> CreateNcclCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                                     int size, const std::string& group_name,
                                                                     int device_index,
                                                                     std::chrono::milliseconds timeout);

}  // namespace magi

#endif  // MAGI_RUNTIME_NCCL_NCCL_COMMUNICATOR_H_
