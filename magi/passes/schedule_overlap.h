// Overlap scheduling of communication with computation.
//
// Reorders the graph (program order is what the runtime executes):
//  - all-gathers, forward and backward alike, are issued `prefetch` all-gathers
//    ahead: the start of the i-th all-gather moves to right after the wait of the
//    (i - prefetch)-th (the first ones to the top), so it runs while the layers
//    before it compute; across the forward/backward boundary too. While more than
//    `max_inflight_mb` of gathered parameters would be in flight, the distance shrinks;
//  - every wait moves to right before the first use of its results, but no later than
//    the next start of its process group on the same kind of collective, so in-flight
//    buffers stay bounded (a group's collectives finish in issue order, so that wait
//    costs nothing extra);
//  - collective starts get streams: 1 all-gather, 2 reduce-scatter, 3 all-reduce and
//    all-to-all; every node's `sched` is its position.
// With prefetch=0 starts stay where they are (only waits sink). Every rank runs the
// same pass on the same graph, so each process group sees its collectives in the same
// order everywhere (no cross-rank reordering, no hang).
//
// Registered as "schedule-overlap{prefetch=N,max_inflight_mb=M}" (defaults 1 and no limit).
#ifndef MAGI_PASSES_SCHEDULE_OVERLAP_H_
#define MAGI_PASSES_SCHEDULE_OVERLAP_H_

#include "magi/passes/pass.h"

namespace magi {

class ScheduleOverlap : public Pass {
 public:
  explicit ScheduleOverlap(int prefetch = 1, double max_inflight_mb = 0)
      : prefetch_(prefetch), max_inflight_bytes_(max_inflight_mb * 1e6) {}
  absl::string_view name() const override { return "schedule-overlap"; }

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;

 private:
  int prefetch_;
  double max_inflight_bytes_;  // 0: no limit
};

}  // namespace magi

#endif  // MAGI_PASSES_SCHEDULE_OVERLAP_H_
