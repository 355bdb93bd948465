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
// freed per second of recompute (the NodeCostOracle's time: magi/cost's CostModel in
// practice), and the shortest prefix of that ranking whose rewritten graph the memory
// planner puts under the budget is taken: a binary search over peaks that
// RecomputePeakProbe predicts exactly without rewriting (recompute_probe.h); the chosen
// rewrite is then planned for real. Recomputing every candidate is not always the least
// memory (each copy keeps what it reads alive until backward), so when all of them do
// not fit, halving prefixes are tried first. The result is deterministic.
// FailedPrecondition if none fits, naming the smallest peak found.
//
// Registered (by //magi/search:auto_recompute_registration, which links the cost model)
// as "auto-recompute{budget_mb=N}" or "{budget_gb=X}", with "profile=cpu|h200|<path>"
// for the ranking (default cpu). Printed as "auto-recompute{budget_mb=N.NNNNNN,profile=P}".
#ifndef MAGI_PASSES_AUTO_RECOMPUTE_H_
#define MAGI_PASSES_AUTO_RECOMPUTE_H_

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "magi/analysis/node_cost.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

// What RecomputeForBackward changed, so that UndoRecompute can take it back exactly
// (searches and the pass's own probes rewrite in place instead of on copies).
struct RecomputeUndo {
  std::vector<Node*> copies;                         // in creation order
  std::vector<std::tuple<Node*, int, Value*>> uses;  // (user, operand index, value it read before)
  std::vector<std::pair<Node*, RematDecision>> remat;  // annotations as they were
};

struct RecomputeReport {
  int64_t peak_before = 0;
  int64_t peak_after = 0;
  int64_t peak_floor = 0;  // with every candidate recomputed
  int candidates = 0;
  int recomputed = 0;            // forward nodes chosen (views included)
  double recompute_seconds = 0;  // predicted time of the copies
};

struct AutoRecomputeOptions : PassOptions<AutoRecomputeOptions> {
  // The budget: budget_mb=N (printed, "%.6f") or budget_gb=X in text; positive, required.
  int64_t budget_bytes = 0;
  // The device profile whose cost model ranks the candidates, as text names it ("" names
  // none). The pass ranks with the model it is given; this records which that is, so a
  // printed pipeline says it (the registered factory builds the model from it: cpu if "").
  std::string profile;

  static AutoRecomputeOptions Budget(int64_t bytes, std::string profile = "");
  static const OptionSchema<AutoRecomputeOptions>& Schema();
};

class AutoRecompute : public GraphPass {
 public:
  using Options = AutoRecomputeOptions;
  static constexpr absl::string_view kName = "auto-recompute";

  // `model` ranks the candidates; never null.
  AutoRecompute(Options options, std::unique_ptr<const NodeCostOracle> model)
      : options_(std::move(options)), model_(std::move(model)) {}
  // Takes a copy of any NodeCostOracle value: AutoRecompute(options, CostModel(profile)).
  template <typename Model, typename = std::enable_if_t<std::is_base_of<NodeCostOracle, std::decay_t<Model>>::value>>
  AutoRecompute(Options options, Model&& model)
      : AutoRecompute(std::move(options), std::make_unique<const std::decay_t<Model>>(std::forward<Model>(model))) {}
  // A budget alone (no profile named): AutoRecompute(budget, CostModel(profile)).
  template <typename Model, typename = std::enable_if_t<std::is_base_of<NodeCostOracle, std::decay_t<Model>>::value>>
  AutoRecompute(int64_t budget_bytes, Model&& model)
      : AutoRecompute(Options::Budget(budget_bytes), std::forward<Model>(model)) {}

  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }
  const RecomputeReport& report() const { return report_; }
  // Records every change the next Run makes in `undo` (null: none), so a caller that
  // evaluates the result can take it back with UndoRecompute.
  void set_undo_log(RecomputeUndo* undo) { undo_ = undo; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  Options options_;
  std::unique_ptr<const NodeCostOracle> model_;
  RecomputeReport report_;
  RecomputeUndo* undo_ = nullptr;
};

// Recomputes the results of `chosen` (forward nodes of `graph`, views of them are
// added) for their backward uses, as described above; returns the copies made. With
// `undo`, appends what it changed there.
std::vector<Node*> RecomputeForBackward(Graph& graph, const std::vector<Node*>& chosen,
                                        RecomputeUndo* undo = nullptr);

// Takes back the changes `undo` recorded, newest first, and clears it. The graph is as
// before (nodes, order, uses, annotations); only the fresh-name counter has moved on.
void UndoRecompute(Graph& graph, RecomputeUndo& undo);

}  // namespace magi

#endif  // MAGI_PASSES_AUTO_RECOMPUTE_H_
