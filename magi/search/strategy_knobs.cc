#include "magi/search/strategy_knobs.h"

#include <memory>

#include "magi/passes/auto_recompute.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/reshard_after_forward.h"

namespace magi {
namespace {

// The caller's model, not owned: plan passes never outlive the search that built them.
class ModelReference : public NodeCostOracle {
 public:
  explicit ModelReference(const CostModel& model) : model_(model) {}
  double NodeSeconds(const Node& node) const override { return model_.NodeSeconds(node); }

 private:
  const CostModel& model_;
};

}  // namespace

int StrategyKnobs::DistanceOf(const std::string& gather_key) const {
  auto it = per_gather.find(gather_key);
  return it == per_gather.end() ? prefetch : it->second;
}

void StrategyKnobs::SetDistance(const std::string& gather_key, int distance) {
  if (distance == prefetch) {
    per_gather.erase(gather_key);
  } else {
    per_gather[gather_key] = distance;
  }
}

void AddStructuralPasses(const StrategyKnobs& knobs, PassManager& manager) {
  if (knobs.keep.empty()) {
    manager.AddPass<ReshardAfterForward>();  // mode=reshard
  } else {
    // Kept groups are never resharded: resharding them first would leave copies of forward
    // views in backward that keeping does not remove (0.6% of the 4-layer step).
    ReshardAfterForwardOptions reshard;
    reshard.except = knobs.keep;
    manager.AddPass<ReshardAfterForward>(reshard);
    ReshardAfterForwardOptions keep;
    keep.reshard = false;
    keep.groups = knobs.keep;
    manager.AddPass<ReshardAfterForward>(keep);
  }
  for (auto [kind, max_mb] : {std::make_pair(CollectiveKind::kAllGather, knobs.bucket_all_gather_mb),
                              std::make_pair(CollectiveKind::kReduceScatter, knobs.bucket_reduce_scatter_mb)}) {
    if (max_mb <= 0) continue;
    BucketCollectivesOptions buckets;
    buckets.kinds = kind;
    buckets.max_mb = max_mb;
    manager.AddPass<BucketCollectives>(buckets);
  }
}

ScheduleOverlapOptions ScheduleOptions(const StrategyKnobs& knobs) {
  ScheduleOverlapOptions options;
  options.prefetch = knobs.prefetch;
  options.max_inflight_mb = knobs.max_inflight_mb;
  options.per_gather = knobs.per_gather;
  return options;
}

void AddKnobsPasses(const StrategyKnobs& knobs, PassManager& manager) {
  AddStructuralPasses(knobs, manager);
  if (knobs.prefetch >= 0) manager.AddPass<ScheduleOverlap>(ScheduleOptions(knobs));
}

void AddPlanPasses(const StrategyKnobs& knobs, int64_t recompute_budget_bytes, const CostModel& model,
                   PassManager& manager) {
  AddKnobsPasses(knobs, manager);
  if (recompute_budget_bytes <= 0) return;
  manager.AddPass<AutoRecompute>(AutoRecomputeOptions::Budget(recompute_budget_bytes, model.profile().name),
                                 std::make_unique<ModelReference>(model));
}

std::string StructuralPipeline(const StrategyKnobs& knobs) {
  PassManager manager;
  AddStructuralPasses(knobs, manager);
  return manager.Print();
}

std::string KnobsPipeline(const StrategyKnobs& knobs) {
  PassManager manager;
  AddKnobsPasses(knobs, manager);
  return manager.Print();
}

std::string PlanPipeline(const StrategyKnobs& knobs, int64_t recompute_budget_bytes, const CostModel& model) {
  PassManager manager;
  AddPlanPasses(knobs, recompute_budget_bytes, model, manager);
  return manager.Print();
}

}  // namespace magi
