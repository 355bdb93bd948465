// A Communicator over Gloo (CPU tensors, TCP), for the CPU runtime and tests.
//
// Connects a full mesh of TCP pairs through a c10d::Store (as c10d's own
// ProcessGroupGloo does) and runs collectives on one worker thread, in start order.
// A collective's tensors travel in one flat buffer, one Gloo call each (one per dtype for
// reductions; collective_packing.h): all_gather uses Gloo's allgather; all_reduce its ring
// allreduce (pinned: one reduction order for a given world size and collective, so
// deterministic mode needs nothing more); reduce_scatter is an allreduce of the packed
// inputs followed by taking this rank's chunk (Gloo's own reduce-scatter needs
// pre-registered buffers; this keeps the result exact at twice the traffic, which CPU
// runs can afford). Reductions support f32, f64, i32 and i64.
// Every collective has `timeout`. A failure names this rank, the collective, the group
// and the cause first: a peer that died or exited (its connection closed or reset, seen
// within milliseconds) is Unavailable; a peer that hangs past `timeout` is
// DeadlineExceeded. The communicator then stays failed and refuses further work.
#ifndef MAGI_RUNTIME_GLOO_GLOO_COMMUNICATOR_H_
#define MAGI_RUNTIME_GLOO_GLOO_COMMUNICATOR_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"

namespace magi {

// `group_name` keys the store entries, so several groups can share one store.
absl::StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                                     int size, const std::string& group_name,
                                                                     std::chrono::milliseconds timeout);

}  // namespace magi

#endif  // MAGI_RUNTIME_GLOO_GLOO_COMMUNICATOR_H_
