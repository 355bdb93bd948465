// Evaluates strategy settings (StrategyKnobs) on a step graph with the simulator as the
// oracle, quickly enough for a search to try hundreds of them on a 10k-node step.
//
// What runs is the real thing: the knobs' passes (AddKnobsPasses, built in code with typed
// options), then the simulator, then (over budget) auto-recompute to the budget and the
// simulator again. What makes it cheap:
//  - each structural variant (resharding and bucketing: the passes that change nodes) is
//    built once per worker and kept; only schedule-overlap (a reordering) and
//    auto-recompute run per evaluation, on that copy, and are taken back afterwards
//    (the order is restored; the recompute rewrite is undone, RecomputeUndo), so no
//    evaluation clones the module;
//  - node times are cached per copy (NodeTimes), and the simulator records only the
//    communication events the search reads;
//  - settings already evaluated (same pipeline text, same budget) come from a cache.
// The result is what the setting's passes (AddPlanPasses) give on a fresh copy of the
// module: the search runs the chosen plan's passes on one (StrategyPlan::optimized) and
// checks that the two predictions agree exactly.
//
// Thread-safe: EvaluateAll spreads a batch over threads; results come back in batch
// order and do not depend on the thread count.
#ifndef MAGI_SEARCH_PLAN_EVALUATOR_H_
#define MAGI_SEARCH_PLAN_EVALUATOR_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/simulator.h"
#include "magi/ir/module.h"
#include "magi/search/strategy_knobs.h"

namespace magi {

struct PlanEvaluation {
  absl::Status status;           // an error of a pass or the simulator (not "does not fit")
  std::string pipeline;          // the knobs' pipeline, printed (without auto-recompute)
  SimulationResult before_recompute;
  SimulationResult prediction;   // after auto-recompute where it ran (events: communication only)
  bool fits = false;
  bool recomputed = false;       // auto-recompute rewrote the graph (the plan needs it)
  bool pruned = false;           // over budget, and not worth recomputing (cannot beat the bound)
  int recomputed_nodes = 0;
  int64_t peak_floor = -1;       // smallest peak recompute reaches, when it could not fit
  // All-gathers (GatherKey) whose waits stall compute, with the stall, largest first.
  std::vector<std::pair<std::string, double>> exposed_gathers;
  // All-gathers whose prefetch holds memory at the peak: in flight there (started, not yet
  // waited for), or started after it from inputs made before it.
  std::vector<std::string> inflight_at_peak;

  // The smallest peak this setting reaches (with recompute where tried).
  int64_t reachable_peak() const { return peak_floor >= 0 ? peak_floor : prediction.peak_bytes; }
};

class PlanEvaluator {
 public:
  // `module` and `model` must outlive the evaluator; neither is changed.
  PlanEvaluator(const Module& module, std::string graph_name, const CostModel& model, bool allow_recompute);
  ~PlanEvaluator();

  // Evaluates every setting at `budget_bytes`, on up to `threads` threads. A setting
  // over budget is given to auto-recompute only if its time before recompute is below
  // `bound_seconds` (recompute only adds time; pass +infinity to always try).
  std::vector<PlanEvaluation> EvaluateAll(const std::vector<StrategyKnobs>& settings, int64_t budget_bytes,
                                          double bound_seconds, int threads);

  // Evaluations run so far (cache misses), and structural variants built.
  int evaluations() const;
  int variants_built() const;
  int recompute_runs() const;  // of them, auto-recompute runs

 private:
  struct Scratch;
  struct Variant;
  PlanEvaluation Evaluate(const StrategyKnobs& knobs, int64_t budget_bytes, double bound_seconds);
  absl::StatusOr<std::unique_ptr<Scratch>> Acquire(Variant& variant);
  void Release(Variant& variant, std::unique_ptr<Scratch> scratch);
  Variant& VariantFor(const StrategyKnobs& knobs);

  const Module& module_;
  const std::string graph_name_;
  const CostModel& model_;
  const bool allow_recompute_;
  mutable absl::Mutex mutex_;
  std::map<std::string, std::unique_ptr<Variant>> variants_;  // by structural pipeline
  // Settled evaluations by (pipeline, budget): only entries whose outcome cannot depend
  // on a bound (fitting, recomputed or failed) are kept, plus pre-recompute results.
  std::map<std::pair<std::string, int64_t>, PlanEvaluation> cache_;
  std::map<std::string, PlanEvaluation> before_recompute_;  // by pipeline: budget-independent
  // (structural pipeline, scheduled order as indices of the variant's nodes) -> the first
  // pipeline that produced it.
  std::map<std::pair<std::string, std::vector<int>>, std::string> same_order_;
  int evaluations_ = 0;
  int variants_built_ = 0;
  int recompute_runs_ = 0;
};

}  // namespace magi

#endif  // MAGI_SEARCH_PLAN_EVALUATOR_H_
