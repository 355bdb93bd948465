#include "magi/search/strategy_knobs.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace magi {

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

std::string StructuralPipeline(const StrategyKnobs& knobs) {
  std::string text = "reshard-after-forward{mode=reshard}";
  if (!knobs.keep.empty()) {
    // Kept groups are never resharded: resharding them first would leave copies of forward
    // views in backward that keeping does not remove (0.6% of the 4-layer step).
    std::vector<std::string> groups;
    for (const std::string& group : knobs.keep) groups.push_back(group.empty() ? "root" : group);
    const std::string kept = absl::StrJoin(groups, "+");
    text = absl::StrCat("reshard-after-forward{except=", kept, ",mode=reshard},reshard-after-forward{groups=", kept,
                        ",mode=keep}");
  }
  if (knobs.bucket_all_gather_mb > 0) {
    absl::StrAppend(&text, ",bucket-collectives{kinds=all_gather,max_mb=", knobs.bucket_all_gather_mb, "}");
  }
  if (knobs.bucket_reduce_scatter_mb > 0) {
    absl::StrAppend(&text, ",bucket-collectives{kinds=reduce_scatter,max_mb=", knobs.bucket_reduce_scatter_mb, "}");
  }
  return text;
}

std::string SchedulePipeline(const StrategyKnobs& knobs) {
  if (knobs.prefetch < 0) return "";
  std::string options;
  if (knobs.max_inflight_mb > 0) absl::StrAppend(&options, "max_inflight_mb=", knobs.max_inflight_mb, ",");
  if (!knobs.per_gather.empty()) absl::StrAppend(&options, "per_gather=", FormatPerGatherPrefetch(knobs.per_gather), ",");
  return absl::StrCat("schedule-overlap{", options, "prefetch=", knobs.prefetch, "}");
}

std::string KnobsPipeline(const StrategyKnobs& knobs) {
  std::string schedule = SchedulePipeline(knobs);
  return schedule.empty() ? StructuralPipeline(knobs) : absl::StrCat(StructuralPipeline(knobs), ",", schedule);
}

}  // namespace magi
