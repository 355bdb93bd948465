// Strategy search: picks bucket size, prefetch depth, reshard policy and recompute set
// for a step graph so that its predicted step time is least under a memory budget.
//
// Every candidate is a pass pipeline, really run on a copy of the module and then
// simulated (magi/cost/simulator.h):
//
//   reshard-after-forward{mode=reshard|keep}[,bucket-collectives{max_mb=B}]
//   [,schedule-overlap{prefetch=P}][,auto-recompute{budget_mb=M}]
//
// (no bucketing for B = 0; no overlap scheduling at all for P = -1, which keeps every
// wait next to its start: slowest, but no collective buffer outlives its use.)
//
// auto-recompute is added only where the predicted peak exceeds the budget. Since
// recompute only adds time, candidates are evaluated in order of their time without
// it, and the search stops once no remaining candidate can beat the best that fits
// (branch and bound). The result is deterministic: same module, options and cost model
// give the same plan (ties go to the earlier candidate of the enumeration).
//
// The plan carries what was evaluated: `optimized` is the very module the chosen
// candidate's passes produced and the simulator predicted (auto-recompute built against
// the caller's CostModel, calibration table included), so compiling it compiles exactly
// the graph that was predicted. The pipeline text is the report, and the recipe to
// reproduce the graph with `magi opt --passes=...` (exact for builtin profiles without
// calibration: the text names the profile, not the table).
#ifndef MAGI_SEARCH_STRATEGY_SEARCH_H_
#define MAGI_SEARCH_STRATEGY_SEARCH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/simulator.h"
#include "magi/ir/module.h"

namespace magi {

struct SearchOptions {
  int64_t memory_budget_bytes = 0;  // 0: the device profile's memory
  // Bucket size limits to try; empty: 0 (none), and 2x and 4x the median collective of
  // the graph (so neighbouring groups can fuse whatever the model's size).
  std::vector<double> bucket_mb;
  std::vector<int> prefetch = {-1, 0, 1, 2};
  std::vector<bool> reshard_after_forward = {true, false};
  bool allow_recompute = true;
  int threads = 0;  // candidates evaluated in parallel (0: one per hardware thread)
};

struct StrategyCandidate {
  std::string pipeline;
  SimulationResult prediction;  // after the whole pipeline (empty if not evaluated)
  bool evaluated = false;
  bool fits = false;
  int recomputed_nodes = 0;
  std::string note;  // why it does not fit, that it was pruned, or that it duplicates another
};

struct StrategyPlan {
  std::string pipeline;  // the chosen candidate's, as text (report and `magi opt` recipe)
  // The module the chosen candidate produced: what `chosen.prediction` simulated.
  std::shared_ptr<Module> optimized;
  StrategyCandidate chosen;
  SimulationResult baseline;  // the graph as given
  int64_t budget_bytes = 0;
  std::vector<StrategyCandidate> candidates;  // in enumeration order
  double search_seconds = 0;
};

// Searches over `graph_name` of `module` (unchanged). FailedPrecondition if no
// candidate fits the budget, naming the smallest peak a pipeline of the search reaches
// (with every activation recomputed, where recompute applies) and that pipeline: a
// budget of that many bytes is met, one byte less is not.
absl::StatusOr<StrategyPlan> SearchStrategy(const Module& module, const std::string& graph_name, const CostModel& model,
                                            const SearchOptions& options = {});

// A table of every candidate with its prediction, the chosen one marked.
std::string FormatStrategyPlan(const StrategyPlan& plan);

}  // namespace magi

#endif  // MAGI_SEARCH_STRATEGY_SEARCH_H_
