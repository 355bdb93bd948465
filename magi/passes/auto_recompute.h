// AutoRecompute: trade recomputation for memory so a training step fits a budget.
//
// Activations are the forward values backward reads. For each one AutoRecompute either
// saves it (kept alive from forward to backward) or recomputes it: the forward nodes
// that make it are copied to right before its first backward use and backward reads the
// copies, so the forward value dies after its last forward use. Recomputed nodes read
// saved values, graph inputs, and parameters gathered again for backward where the
// graph has such a gather (never a forward gather FSDP resharded).
//
// Choice: candidates (pure, deterministic forward nodes with a backward use; never
// collectives, random or in-place ops; views follow their base) are ranked by bytes
// freed per second of recompute (the cost model's time), and the shortest prefix of
// that ranking whose rewritten graph the memory planner puts under the budget is taken
// (binary search, each probe a real rewrite of a copy + plan). The result is
// deterministic. FailedPrecondition if recomputing every candidate still does not fit,
// naming the smallest peak reachable.
//
// Registered as "auto-recompute{budget_mb=N}" or "{budget_gb=X}", with
// "profile=cpu|h200|<path>" for the ranking (default cpu).
#ifndef MAGI_PASSES_AUTO_RECOMPUTE_H_
#define MAGI_PASSES_AUTO_RECOMPUTE_H_

#include <memory>

#include "magi/cost/cost_model.h"
#include "magi/passes/pass.h"
#include "magi/registry/registry.h"

namespace magi {

struct RecomputeReport {
  int64_t peak_before = 0;
  int64_t peak_after = 0;
  int64_t peak_floor = 0;  // with every candidate recomputed
  int candidates = 0;
  int recomputed = 0;            // forward nodes chosen (views included)
  double recompute_seconds = 0;  // predicted time of the copies
};

class AutoRecompute : public Pass {
 public:
  AutoRecompute(int64_t budget_bytes, CostModel model) : budget_bytes_(budget_bytes), model_(std::move(model)) {}
  absl::string_view name() const override { return "auto-recompute"; }
  const RecomputeReport& report() const { return report_; }

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;

 private:
  absl::StatusOr<bool> RunOnGraph(Module& module, Graph& graph);

  int64_t budget_bytes_;
  CostModel model_;
  RecomputeReport report_;
};

// An AutoRecompute from textual options (budget_mb=N or budget_gb=X; profile=NAME is
// accepted and must name `model`'s profile) that ranks with `model`. The registered
// "auto-recompute" builds its model from `profile` (default cpu); compilers call this
// with their own model so a calibration table or a file profile is not lost.
absl::StatusOr<std::unique_ptr<AutoRecompute>> MakeAutoRecompute(const ComponentOptions& options, CostModel model);

// Recomputes the results of `chosen` (forward nodes of `graph`, views of them are
// added) for their backward uses, as described above; returns the copies made.
std::vector<Node*> RecomputeForBackward(Graph& graph, const std::vector<Node*>& chosen);

}  // namespace magi

#endif  // MAGI_PASSES_AUTO_RECOMPUTE_H_
