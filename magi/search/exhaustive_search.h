// Exhaustive strategy search over a fixed space of knob settings: the yardstick the
// local search (strategy_search.h) is measured against on small steps, where trying
// every setting is affordable. Every combination of
//  - the set of FSDP groups kept gathered for backward (every subset of the groups that
//    backward gathers again: 2^groups),
//  - an all-gather and a reduce-scatter bucket size (each from `bucket_mb`),
//  - a uniform prefetch depth (`prefetch`; -1: no overlap scheduling),
//  - an in-flight cap (`max_inflight_mb`; 0: none),
// is evaluated with the same PlanEvaluator (auto-recompute to the budget where over it).
// It does not try per-gather prefetch distances (their product is too large to
// enumerate); the local search does, so it may beat this "exhaustive" best.
//
// Exact under the evaluator's rule that recompute only adds time: settings are
// recomputed in order of their time before recompute until none left can beat the best
// that fits (branch and bound), so the best found is the best of the whole space.
#ifndef MAGI_SEARCH_EXHAUSTIVE_SEARCH_H_
#define MAGI_SEARCH_EXHAUSTIVE_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"
#include "magi/search/plan_evaluator.h"
#include "magi/search/strategy_knobs.h"

namespace magi {

struct ExhaustiveSpace {
  std::vector<int> prefetch = {-1, 0, 1, 2, 3, 4};
  // Empty: 0 and 2x and 4x the median collective (whole MB), per kind.
  std::vector<double> bucket_mb;
  // Empty: 0 and 1.5x and 3x the largest all-gather (whole MB).
  std::vector<double> max_inflight_mb;
  // Groups kept: every subset (true), or only "none" and suffixes of the forward order
  // plus the root group on its own (false: linear in the groups, for larger steps).
  bool all_subsets = true;
};

// Every setting of `space` for `graph` (deterministic order).
std::vector<StrategyKnobs> ExhaustiveSettings(const Graph& graph, const ExhaustiveSpace& space);

struct ExhaustiveResult {
  bool found = false;  // some setting fits the budget
  StrategyKnobs knobs;
  PlanEvaluation best;  // when found
  int settings = 0;     // size of the space
  int recomputed = 0;   // settings given to auto-recompute
};

// The best (fastest; then smallest peak; then first) setting of `settings` that fits
// `budget_bytes`. Errors of a pass or the simulator are returned.
absl::StatusOr<ExhaustiveResult> ExhaustiveBest(PlanEvaluator& evaluator, const std::vector<StrategyKnobs>& settings,
                                                int64_t budget_bytes, int threads);

}  // namespace magi

#endif  // MAGI_SEARCH_EXHAUSTIVE_SEARCH_H_
