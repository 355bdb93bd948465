// Overlap scheduling of communication with computation.
//
// Reorders the graph (program order is what the runtime executes):
//  - all-gathers, forward and backward alike, are issued `prefetch` all-gathers
//    ahead: the start of the i-th all-gather moves to right after the wait of the
//    (i - prefetch)-th (the first ones to the top), so it runs while the layers
//    before it compute; across the forward/backward boundary too. While more than
//    `max_inflight_mb` of gathered parameters would be in flight, the distance shrinks;
//    `per_gather` sets the distance of single gathers by their FSDP group and phase
//    (GatherKey: "layers.31.bwd", "root.fwd"), e.g. 0 for a gather whose buffer would
//    sit at the memory peak;
//  - every wait moves to right before the first use of its results, but no later than
//    the next start of its process group on the same kind of collective, so in-flight
//    buffers stay bounded (a group's collectives finish in issue order, so that wait
//    costs nothing extra);
//  - collective starts get streams: 1 all-gather, 2 reduce-scatter, 3 all-reduce and
//    all-to-all; every node's `sched` is its position.
// With prefetch=0 starts stay where they are (only waits sink). Every rank runs the
// same pass on the same graph, so each process group sees its collectives in the same
// order everywhere (no cross-rank reordering, no hang). It never moves compute other
// than the casts that feed a gather it issues earlier.
//
// Registered as "schedule-overlap{prefetch=N,max_inflight_mb=M,per_gather=G.PHASE.N+...}"
// (defaults 1, no limit, none; prefetch is always printed), e.g.
// per_gather=root.bwd.0+layers.31.bwd.1.
#ifndef MAGI_PASSES_SCHEDULE_OVERLAP_H_
#define MAGI_PASSES_SCHEDULE_OVERLAP_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

class ProgramOrder;

// Prefetch distances by GatherKey.
using PerGatherPrefetch = std::map<std::string, int>;

// The key per_gather uses for an all-gather start: its FSDP group (module path, "root"
// for the root group) and phase, "layers.3.fwd".
std::string GatherKey(const Node& start);

// Parses and prints per_gather's value ("root.bwd.0+layers.31.bwd.1", keys in order).
absl::StatusOr<PerGatherPrefetch> ParsePerGatherPrefetch(absl::string_view text);
std::string FormatPerGatherPrefetch(const PerGatherPrefetch& distances);

struct ScheduleOverlapOptions : PassOptions<ScheduleOverlapOptions> {
  static constexpr int kMaxPrefetch = 64;
  int prefetch = 1;             // gathers ahead, 0..kMaxPrefetch
  double max_inflight_mb = 0;   // gathered megabytes in flight, at most; 0: no limit
  PerGatherPrefetch per_gather;  // distances by GatherKey that differ from `prefetch`

  static const OptionSchema<ScheduleOverlapOptions>& Schema();
};

class ScheduleOverlap : public GraphPass {
 public:
  using Options = ScheduleOverlapOptions;
  static constexpr absl::string_view kName = "schedule-overlap";

  explicit ScheduleOverlap(Options options = {}) : options_(std::move(options)) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  int DistanceOf(const Node& start) const;
  bool PrefetchGathers(ProgramOrder& order) const;
  bool SinkWaits(ProgramOrder& order) const;

  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_SCHEDULE_OVERLAP_H_
