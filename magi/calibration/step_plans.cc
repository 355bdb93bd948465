#include "magi/calibration/step_plans.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi::calibration {

absl::StatusOr<const NodePlan*> StepPlans::PlanOf(const Node& node) {
  const Graph* graph = node.graph();
  auto it = plans_.find(graph);
  if (it == plans_.end()) {
    MAGI_ASSIGN_OR_RETURN(StepPlan plan, BuildStepPlan(*graph));
    Plans entry;
    entry.step = std::make_unique<StepPlan>(std::move(plan));
    for (size_t i = 0; i < entry.step->nodes.size(); ++i) entry.index[entry.step->nodes[i].node] = i;
    entry.cache = std::make_unique<OperandCacheModel>(*graph);
    it = plans_.emplace(graph, std::move(entry)).first;
  }
  auto index = it->second.index.find(&node);
  if (index == it->second.index.end()) return absl::InternalError(absl::StrCat(Where(node), ": not in its graph"));
  return &it->second.step->nodes[index->second];
}

}  // namespace magi::calibration
