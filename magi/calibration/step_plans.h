// The interpreter's plans of the graphs whose kernels a calibration times, built once per
// graph: how each node is called (BuildStepPlan: the same op calling and result check as
// the interpreter's) and which of its operands a step finds in this core's cache
// (magi/analysis/cache_reuse.h).
//
//   StepPlans plans;
//   MAGI_ASSIGN_OR_RETURN(const NodePlan* plan, plans.PlanOf(node));
//   const StepPlan& step = plans.StepOf(*node.graph());
//
// It keeps pointers into the graphs: Clear() before they may go (the calibrator clears at
// the start and end of each call).
#ifndef MAGI_CALIBRATION_STEP_PLANS_H_
#define MAGI_CALIBRATION_STEP_PLANS_H_

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/analysis/cache_reuse.h"
#include "magi/backend/common/step_plan.h"
#include "magi/ir/graph.h"

namespace magi::calibration {

class StepPlans {
 public:
  // The plan of the node's graph (built on first use) and the node's entry in it.
  absl::StatusOr<const NodePlan*> PlanOf(const Node& node);
  // The plan of `graph`; PlanOf one of its nodes must have succeeded first.
  const StepPlan& StepOf(const Graph& graph) const { return *plans_.at(&graph).step; }
  // Which operands the step finds in cache; as StepOf.
  const OperandCacheModel& CacheOf(const Graph& graph) const { return *plans_.at(&graph).cache; }
  void Clear() { plans_.clear(); }

 private:
  struct Plans {
    std::unique_ptr<StepPlan> step;
    absl::flat_hash_map<const Node*, size_t> index;
    std::unique_ptr<OperandCacheModel> cache;  // which operands the step finds in cache
  };
  absl::flat_hash_map<const Graph*, Plans> plans_;
};

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_STEP_PLANS_H_
