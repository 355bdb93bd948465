// What a runtime that drives NCCL itself (the nccl_stream backend: its own streams, lanes
// split from the communicator) needs beyond the Communicator interface: the NCCL
// communicator handle, its device and timeout, the failure handling every user of the
// communicator shares, and NCCL's names for Magi's dtypes and reductions.
//
//   auto nccl = std::dynamic_pointer_cast<NcclCommunicator>(communicator);
//   if (nccl == nullptr) return absl::InvalidArgumentError("needs the \"nccl\" communicator");
//   ncclCommSplit(nccl->comm(), ...);
//
// The implementation is //magi/runtime/nccl:nccl_communicator (CreateNcclCommunicator, and
// the "nccl" entry of the communicator registry); this header does not create one.
#ifndef MAGI_COMM_NCCL_H_
#define MAGI_COMM_NCCL_H_

#include <ATen/ATen.h>
#include <nccl.h>

#include <chrono>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/comm/communicator.h"

namespace magi {

// A Communicator over one NCCL communicator.
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

}  // namespace magi

#endif  // MAGI_COMM_NCCL_H_
