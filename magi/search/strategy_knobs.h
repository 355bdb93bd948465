// The knobs the strategy search turns, and the passes each setting stands for.
//
// A setting is built in code as pass objects with typed options (AddKnobsPasses); its text,
// printed from those passes, is the report, the cache key and the `magi opt` recipe:
//
//   reshard-after-forward{mode=reshard}                       every group re-gathered in backward, or with
//     kept groups G, H (FSDP2's "keep the last layers"):
//   reshard-after-forward{except=G+H,mode=reshard},reshard-after-forward{groups=G+H,mode=keep}
//   [,bucket-collectives{kinds=all_gather,max_mb=B}]          bucket sizes, per kind of collective
//   [,bucket-collectives{kinds=reduce_scatter,max_mb=B}]
//   [,schedule-overlap{max_inflight_mb=M,per_gather=K.D+...,prefetch=P}]
//   [,auto-recompute{budget_mb=N,profile=P}]                  a plan's, when it needs recompute
//
// The text is canonical (options sorted, as the passes print them), so two settings are
// the same plan exactly when their texts are equal.
#ifndef MAGI_SEARCH_STRATEGY_KNOBS_H_
#define MAGI_SEARCH_STRATEGY_KNOBS_H_

#include <cstdint>
#include <set>
#include <string>

#include "magi/cost/cost_model.h"
#include "magi/passes/pipeline.h"
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

// Adds the passes that change the graph's nodes (resharding, bucketing) to `manager`.
void AddStructuralPasses(const StrategyKnobs& knobs, PassManager& manager);
// schedule-overlap's options for `knobs` (which must schedule: prefetch >= 0).
ScheduleOverlapOptions ScheduleOptions(const StrategyKnobs& knobs);
// The structural passes, then schedule-overlap (none for prefetch -1).
void AddKnobsPasses(const StrategyKnobs& knobs, PassManager& manager);
// A plan's passes: the knobs' passes, then auto-recompute to `recompute_budget_bytes`
// (none when 0), ranking with `model`, which is not copied and must outlive `manager`.
void AddPlanPasses(const StrategyKnobs& knobs, int64_t recompute_budget_bytes, const CostModel& model,
                   PassManager& manager);

// The passes above, printed (PassManager::Print).
std::string StructuralPipeline(const StrategyKnobs& knobs);
std::string KnobsPipeline(const StrategyKnobs& knobs);
std::string PlanPipeline(const StrategyKnobs& knobs, int64_t recompute_budget_bytes, const CostModel& model);

}  // namespace magi

#endif  // MAGI_SEARCH_STRATEGY_KNOBS_H_
