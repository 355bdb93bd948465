// The knobs the strategy search turns, and the pass pipeline each setting stands for.
//
//   reshard-after-forward{mode=reshard}                       every group re-gathered in backward, or with
//     kept groups G, H (FSDP2's "keep the last layers"):
//   reshard-after-forward{except=G+H,mode=reshard},reshard-after-forward{groups=G+H,mode=keep}
//   [,bucket-collectives{kinds=all_gather,max_mb=B}]          bucket sizes, per kind of collective
//   [,bucket-collectives{kinds=reduce_scatter,max_mb=B}]
//   [,schedule-overlap{max_inflight_mb=M,per_gather=K.D+...,prefetch=P}]
//
// (auto-recompute, when the search needs it, comes last with the budget.) The text is
// canonical (options sorted, as PrintPassPipeline writes them), so two settings are the
// same plan exactly when their texts are equal.
#ifndef MAGI_SEARCH_STRATEGY_KNOBS_H_
#define MAGI_SEARCH_STRATEGY_KNOBS_H_

#include <set>
#include <string>

#include "magi/passes/schedule_overlap.h"

namespace magi {

struct StrategyKnobs {
  // FSDP groups (module paths; "" is the root group) whose forward all-gather backward
  // reuses instead of gathering again.
  std::set<std::string> keep;
  double bucket_all_gather_mb = 0;      // 0: no bucketing of all-gathers
  double bucket_reduce_scatter_mb = 0;  // 0: no bucketing of reduce-scatters
  int prefetch = 1;                     // -1: no overlap scheduling at all
  double max_inflight_mb = 0;           // 0: no limit
  PerGatherPrefetch per_gather;         // distances that differ from `prefetch`

  // The distance of the gather with this GatherKey.
  int DistanceOf(const std::string& gather_key) const;
  // Sets one gather's distance (dropping the entry when it equals `prefetch`).
  void SetDistance(const std::string& gather_key, int distance);
};

// The passes that change the graph's nodes (resharding, bucketing), and the one that
// only reorders it (schedule-overlap; "" for prefetch -1).
std::string StructuralPipeline(const StrategyKnobs& knobs);
std::string SchedulePipeline(const StrategyKnobs& knobs);
// Both, joined.
std::string KnobsPipeline(const StrategyKnobs& knobs);

}  // namespace magi

#endif  // MAGI_SEARCH_STRATEGY_KNOBS_H_
