#include "magi/search/plan_evaluator.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/pipeline.h"
#include "magi/passes/schedule_overlap.h"

namespace magi {

// A worker's copy of one structural variant, in its pristine order between evaluations.
struct PlanEvaluator::Scratch {
  std::unique_ptr<Module> module;
  Graph* graph = nullptr;
  std::vector<Node*> base_order;
  absl::flat_hash_map<const Node*, int> base_index;
  NodeTimes times;
};

struct PlanEvaluator::Variant {
  std::string pipeline;  // StructuralPipeline(knobs)
  StrategyKnobs knobs;   // the first setting that asked for this variant
  absl::Mutex mutex;
  std::vector<std::unique_ptr<Scratch>> idle;
};

PlanEvaluator::PlanEvaluator(const Module& module, std::string graph_name, const CostModel& model,
                             bool allow_recompute)
    : module_(module), graph_name_(std::move(graph_name)), model_(model), allow_recompute_(allow_recompute) {}

PlanEvaluator::~PlanEvaluator() = default;

int PlanEvaluator::evaluations() const {
  absl::MutexLock lock(&mutex_);
  return evaluations_;
}

int PlanEvaluator::recompute_runs() const {
  absl::MutexLock lock(&mutex_);
  return recompute_runs_;
}

int PlanEvaluator::variants_built() const {
  absl::MutexLock lock(&mutex_);
  return variants_built_;
}

PlanEvaluator::Variant& PlanEvaluator::VariantFor(const StrategyKnobs& knobs) {
  const std::string structural = StructuralPipeline(knobs);
  absl::MutexLock lock(&mutex_);
  std::unique_ptr<Variant>& variant = variants_[structural];
  if (variant == nullptr) {
    variant = std::make_unique<Variant>();
    variant->pipeline = structural;
    variant->knobs = knobs;
  }
  return *variant;
}

absl::StatusOr<std::unique_ptr<PlanEvaluator::Scratch>> PlanEvaluator::Acquire(Variant& variant) {
  {
    absl::MutexLock lock(&variant.mutex);
    if (!variant.idle.empty()) {
      std::unique_ptr<Scratch> scratch = std::move(variant.idle.back());
      variant.idle.pop_back();
      return scratch;
    }
  }
  auto scratch = std::make_unique<Scratch>();
  scratch->module = CloneModule(module_);
  PassManager structural(/*verify_each=*/false);
  AddStructuralPasses(variant.knobs, structural);
  absl::StatusOr<bool> changed = structural.Run(*scratch->module);
  if (!changed.ok()) return changed.status();
  scratch->graph = scratch->module->FindGraph(graph_name_);
  if (scratch->graph == nullptr) return absl::NotFoundError(absl::StrCat("no graph @", graph_name_));
  scratch->base_order = scratch->graph->nodes();
  scratch->base_index.reserve(scratch->base_order.size());
  for (int i = 0; i < static_cast<int>(scratch->base_order.size()); ++i) scratch->base_index[scratch->base_order[i]] = i;
  absl::MutexLock lock(&mutex_);
  ++variants_built_;
  return scratch;
}

void PlanEvaluator::Release(Variant& variant, std::unique_ptr<Scratch> scratch) {
  absl::MutexLock lock(&variant.mutex);
  variant.idle.push_back(std::move(scratch));
}

namespace {

// The cost model's node times through a copy's cache (auto-recompute ranks every
// forward node on each run; a compute node's time does not change between runs, and
// NodeTimes asks the model again for collective starts, whose may).
class CachedTimes : public NodeCostOracle {
 public:
  CachedTimes(const CostModel& model, NodeTimes& times) : model_(model), times_(times) {}
  double NodeSeconds(const Node& node) const override { return times_.Seconds(node, model_); }

 private:
  const CostModel& model_;
  NodeTimes& times_;
};

// Fills the search hints of `evaluation` from a simulation of `graph`.
void ReadHints(const Graph& graph, const SimulationResult& result, PlanEvaluation& evaluation) {
  std::vector<Node*> nodes = graph.nodes();
  evaluation.exposed_gathers.clear();
  for (const SimulatedEvent& event : result.events) {
    if (event.stream != 0 || event.name != "wait" || event.end_s <= event.start_s) continue;
    const Node* start = StartOfWait(*nodes[event.node_index]);
    if (start == nullptr || start->op() != kAllGatherStartOp) continue;
    evaluation.exposed_gathers.emplace_back(GatherKey(*start), event.end_s - event.start_s);
  }
  std::stable_sort(evaluation.exposed_gathers.begin(), evaluation.exposed_gathers.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  // Gathers whose prefetch holds memory at the peak: started before it and waited after, or
  // started after it from inputs made before it (the shard casts a prefetched gather's
  // operands are: on the 8B step captured with 2.x, layers.31's 61 MB at the start of the
  // backward).
  evaluation.inflight_at_peak.clear();
  const int peak = result.peak_node;
  if (peak < 0) return;
  absl::flat_hash_map<const Node*, int> position;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) position[nodes[i]] = i;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (nodes[i]->op() != kAllGatherStartOp) continue;
    bool holds = false;
    if (i <= peak) {
      const Node* wait = WaitOfStart(*nodes[i]);
      auto it = wait == nullptr ? position.end() : position.find(wait);
      holds = it != position.end() && it->second > peak;
    } else {
      for (const Value* operand : nodes[i]->operands()) {
        auto it = operand->producer() == nullptr ? position.end() : position.find(operand->producer());
        holds = holds || (it != position.end() && it->second <= peak);
      }
    }
    if (holds) evaluation.inflight_at_peak.push_back(GatherKey(*nodes[i]));
  }
}

}  // namespace

PlanEvaluation PlanEvaluator::Evaluate(const StrategyKnobs& knobs, int64_t budget_bytes, double bound_seconds) {
  const std::string pipeline = KnobsPipeline(knobs);
  std::optional<PlanEvaluation> before;
  {
    absl::MutexLock lock(&mutex_);
    auto settled = cache_.find({pipeline, budget_bytes});
    if (settled != cache_.end()) return settled->second;
    auto found = before_recompute_.find(pipeline);
    if (found != before_recompute_.end()) before = found->second;
  }
  // What the pre-recompute result alone decides.
  auto decide_without_recompute = [&](PlanEvaluation evaluation) -> std::optional<PlanEvaluation> {
    if (!evaluation.status.ok()) return evaluation;
    evaluation.fits = evaluation.prediction.peak_bytes <= budget_bytes;
    if (evaluation.fits || !allow_recompute_) return evaluation;
    if (evaluation.prediction.step_seconds >= bound_seconds) {
      evaluation.pruned = true;
      return evaluation;
    }
    return std::nullopt;
  };
  if (before) {
    if (std::optional<PlanEvaluation> decided = decide_without_recompute(*before)) return *decided;
  }

  PlanEvaluation evaluation;
  evaluation.pipeline = pipeline;
  Variant& variant = VariantFor(knobs);
  absl::StatusOr<std::unique_ptr<Scratch>> acquired = Acquire(variant);
  if (!acquired.ok()) {
    evaluation.status = acquired.status();
    return evaluation;
  }
  Scratch& scratch = **acquired;
  Graph& graph = *scratch.graph;
  SimulateOptions simulate;
  simulate.events = SimulateOptions::Events::kCommunication;
  simulate.node_times = &scratch.times;
  auto run = [&]() -> absl::Status {
    if (knobs.prefetch >= 0) {
      ScheduleOverlap schedule(ScheduleOptions(knobs));
      MAGI_RETURN_IF_ERROR(schedule.Run(*scratch.module).status());
    }
    // Settings that schedule the same variant into the same order are the same plan
    // (a prefetch distance the order already satisfies, say): reuse that evaluation.
    std::vector<int> order;
    order.reserve(scratch.base_order.size());
    for (const Node* node : graph.nodes()) order.push_back(scratch.base_index.at(node));
    {
      absl::MutexLock lock(&mutex_);
      auto [same, inserted] = same_order_.try_emplace({variant.pipeline, std::move(order)}, pipeline);
      if (!inserted && same->second != pipeline) {
        auto settled = cache_.find({same->second, budget_bytes});
        if (settled != cache_.end()) {
          PlanEvaluation reused = settled->second;
          reused.pipeline = pipeline;
          evaluation = std::move(reused);
          return absl::OkStatus();
        }
      }
    }
    MAGI_ASSIGN_OR_RETURN(evaluation.prediction, Simulate(graph, model_, simulate));
    evaluation.before_recompute = evaluation.prediction;
    ReadHints(graph, evaluation.prediction, evaluation);
    if (!before) {
      absl::MutexLock lock(&mutex_);
      ++evaluations_;
      before_recompute_.emplace(pipeline, evaluation);
    }
    if (std::optional<PlanEvaluation> decided = decide_without_recompute(evaluation)) {
      evaluation = *std::move(decided);
      return absl::OkStatus();
    }
    AutoRecompute recompute(AutoRecomputeOptions::Budget(budget_bytes, model_.profile().name),
                            std::make_unique<CachedTimes>(model_, scratch.times));
    RecomputeUndo undo;
    recompute.set_undo_log(&undo);
    absl::StatusOr<bool> changed = recompute.Run(*scratch.module);
    absl::Status status = changed.status();
    if (changed.ok()) {
      absl::StatusOr<SimulationResult> after = Simulate(graph, model_, simulate);
      if (after.ok()) {
        evaluation.prediction = *std::move(after);
        evaluation.recomputed = *changed;
        evaluation.recomputed_nodes = recompute.report().recomputed;
        evaluation.fits = evaluation.prediction.peak_bytes <= budget_bytes;
        ReadHints(graph, evaluation.prediction, evaluation);
      } else {
        status = after.status();
      }
    } else if (status.code() == absl::StatusCode::kFailedPrecondition) {
      evaluation.peak_floor = recompute.report().peak_floor;
      status = absl::OkStatus();  // does not fit: an answer, not an error
    }
    for (const Node* copy : undo.copies) scratch.times.Forget(copy);
    UndoRecompute(graph, undo);
    absl::MutexLock lock(&mutex_);
    ++evaluations_;
    ++recompute_runs_;
    return status;
  };
  evaluation.status = run();
  for (Node* node : scratch.base_order) graph.MoveBefore(node, nullptr);
  Release(variant, *std::move(acquired));
  if (evaluation.status.ok() && !evaluation.pruned) {
    absl::MutexLock lock(&mutex_);
    cache_.emplace(std::make_pair(pipeline, budget_bytes), evaluation);
  }
  return evaluation;
}

std::vector<PlanEvaluation> PlanEvaluator::EvaluateAll(const std::vector<StrategyKnobs>& settings,
                                                       int64_t budget_bytes, double bound_seconds, int threads) {
  std::vector<PlanEvaluation> results(settings.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < settings.size(); i = next++) results[i] = Evaluate(settings[i], budget_bytes, bound_seconds);
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(settings.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& thread : pool) thread.join();
  return results;
}

}  // namespace magi
