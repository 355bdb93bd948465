// Strategy search: picks how a step graph is resharded, bucketed, scheduled and
// recomputed so that its predicted step time is least under a memory budget.
//
// The knobs (strategy_knobs.h), jointly:
//  - reshard-after-forward per FSDP group: keep the forward gather for backward (e.g. the
//    last k groups, which backward needs first, as FSDP2 users do for the last layer);
//  - bucket sizes per kind of collective (all-gather, reduce-scatter);
//  - prefetch depth, a cap on in-flight gathered bytes, and a prefetch distance per
//    gather where it pays (per_gather: less prefetch just where the memory peak is);
//  - recompute: auto-recompute to the budget after the schedule, so the budget is split
//    between prefetch buffers (and kept groups) and saved activations by the choice of
//    the other knobs.
//
// Method (scales with the number of groups; the simulator is the oracle):
//  1. a grid of uniform settings (prefetch x kept suffix x bucketing), each evaluated
//     without recompute (PlanEvaluator: the real passes on a per-worker copy, undone
//     after), then, best time first, with recompute where over budget, stopping when no
//     remaining candidate can beat the best that fits (recompute only adds time);
//  2. local search from the best grid point: its neighbours change one knob where the
//     simulation says it matters: one more prefetch for a gather whose wait stalls, one
//     less for a gather in flight at the memory peak, one more or one fewer kept group,
//     the uniform depth, the cap, the bucket sizes. The best neighbour that improves
//     (fits first, then time, then peak) is taken until none does. Each round's
//     neighbours are evaluated in parallel.
// Deterministic: the same module, options and cost model give the same plan whatever
// the thread count (ties go to the earlier candidate; batches come back in order).
//
// The search composes pass objects with typed options (AddPlanPasses, strategy_knobs.h);
// it never parses text. The plan carries what was evaluated: `optimized` is the module
// the chosen plan's passes produce on a fresh copy of the input (auto-recompute ranking
// with the caller's CostModel, calibration table included), and `chosen.prediction` is
// its simulation, so compiling it compiles exactly the graph that was predicted. The
// pipeline text, printed from those passes, is the report, and the recipe to reproduce
// the graph with `magi opt --passes=...` (exact for builtin profiles without calibration:
// the text names the profile, not the table).
#ifndef MAGI_SEARCH_STRATEGY_SEARCH_H_
#define MAGI_SEARCH_STRATEGY_SEARCH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/simulator.h"
#include "magi/ir/module.h"
#include "magi/search/strategy_knobs.h"

namespace magi {

// The search space and effort. The budget is not here: it is SearchStrategy's argument (and
// CompileOptions::optimization.memory_budget_bytes, the one field that holds it for a compile).
struct SearchOptions {
  // Grid: bucket size limits (applied to both kinds); empty: 0 (none) and 2x the median
  // collective of the graph (so neighbouring groups can fuse whatever the model's size).
  std::vector<double> bucket_mb;
  // Grid: uniform prefetch depths (-1: no overlap scheduling at all, which keeps every
  // wait next to its start: slowest, but no collective buffer outlives its use).
  std::vector<int> prefetch = {-1, 0, 1, 2};
  // Grid: how many of the last forward groups keep their gathers for backward.
  std::vector<int> keep_last = {0, 1};
  bool allow_recompute = true;
  // Local search from the best grid point (off: the grid alone, as the old search did).
  bool local_search = true;
  int max_rounds = 16;   // of local search
  int max_prefetch = 4;  // largest prefetch distance the local search tries
  // The local search recomputes a candidate only if, before recompute, it is at least
  // this much (relative) faster than the best plan so far: a bound on the work spent on
  // differences below the model's accuracy.
  double min_improvement = 0.002;
  int threads = 0;       // candidates evaluated in parallel (0: one per hardware thread)
};

struct StrategyCandidate {
  std::string pipeline;
  SimulationResult prediction;  // after the whole pipeline (empty if not evaluated)
  bool evaluated = false;
  bool fits = false;
  int recomputed_nodes = 0;
  std::string origin;  // "grid", or the local-search move that made it
  std::string note;    // why it does not fit, that it was pruned, ...
};

struct StrategyPlan {
  std::string pipeline;  // the chosen candidate's, as text (report and `magi opt` recipe)
  // The module the chosen pipeline produced: what `chosen.prediction` simulated.
  std::shared_ptr<Module> optimized;
  StrategyCandidate chosen;
  SimulationResult baseline;  // the graph as given
  int64_t budget_bytes = 0;
  std::vector<StrategyCandidate> candidates;  // in evaluation order
  int rounds = 0;                             // of local search
  int evaluations = 0;                        // simulations and recompute runs (cache misses)
  int recompute_runs = 0;                     // of them, auto-recompute runs
  int variants = 0;                           // structural variants built (copies of the module)
  double search_seconds = 0;                  // wall time
};

// Searches over `graph_name` of `module` (unchanged) for the fastest pipeline whose predicted
// peak fits `memory_budget_bytes` per rank (0: the device profile's memory). FailedPrecondition if no
// candidate fits the budget, naming the smallest peak a pipeline of the search reaches
// (with every activation recomputed, where recompute applies) and that pipeline: a
// budget of that many bytes is met, one byte less is not.
absl::StatusOr<StrategyPlan> SearchStrategy(const Module& module, const std::string& graph_name, const CostModel& model,
                                            int64_t memory_budget_bytes, const SearchOptions& options = {});

// A table of every candidate with its prediction, the chosen one marked.
std::string FormatStrategyPlan(const StrategyPlan& plan);

// One point of a budget frontier: the search's plan at that budget, or why none fits.
struct FrontierPoint {
  int64_t budget_bytes = 0;
  absl::Status status;  // FailedPrecondition: nothing fits this budget
  StrategyPlan plan;    // when status is ok (plan.optimized is dropped to save memory)
};

// Runs the search at every budget, sharing evaluations between budgets (what does not
// depend on the budget is simulated once). Budgets are searched smallest first, each
// search also trying the plans chosen at the smaller budgets (they fit); afterwards
// each point takes the fastest plan found at any budget whose peak fits it (its
// `chosen.origin` then names that budget). So the predicted step time never rises with
// the budget. Points come back in `budgets` order.
absl::StatusOr<std::vector<FrontierPoint>> SearchFrontier(const Module& module, const std::string& graph_name,
                                                          const CostModel& model, const std::vector<int64_t>& budgets,
                                                          const SearchOptions& options = {});

// The frontier as a table: budget, predicted step, exposed communication, peak,
// recomputed nodes, search time and the pipeline of each point.
std::string FormatFrontier(const std::vector<FrontierPoint>& points);

}  // namespace magi

#endif  // MAGI_SEARCH_STRATEGY_SEARCH_H_
