#include "magi/search/strategy_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/pipeline.h"
#include "magi/search/plan_evaluator.h"

namespace magi {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// What the search knows about the graph's FSDP structure.
struct GraphFacts {
  std::vector<std::string> forward_groups;  // module paths of forward all-gathers, program order
  std::set<std::string> regathered;         // groups with a backward all-gather
  std::vector<double> bucket_sizes;         // grid values (0 first)
  double largest_gather_mb = 0;
};

GraphFacts ReadFacts(const Graph& graph, const SearchOptions& options) {
  GraphFacts facts;
  std::vector<int64_t> sizes;
  std::set<std::string> seen;
  for (const Node* node : graph.nodes()) {
    if (!IsCollectiveStart(node->op())) continue;
    sizes.push_back(BucketCollectives::BucketBytes(*node));
    if (node->op() != kAllGatherStartOp) continue;
    facts.largest_gather_mb = std::max(facts.largest_gather_mb, BucketCollectives::BucketBytes(*node) / 1e6);
    const std::string& group = node->annotations().module_path;
    if (node->annotations().phase == Phase::kBackward) {
      facts.regathered.insert(group);
    } else if (seen.insert(group).second) {
      facts.forward_groups.push_back(group);
    }
  }
  facts.bucket_sizes = options.bucket_mb;
  if (facts.bucket_sizes.empty()) {
    facts.bucket_sizes = {0};
    if (!sizes.empty()) {
      // 2x the median collective (whole megabytes, so the pipeline text stays short):
      // typical neighbours fuse in pairs.
      std::nth_element(sizes.begin(), sizes.begin() + sizes.size() / 2, sizes.end());
      facts.bucket_sizes.push_back(2 * std::ceil(sizes[sizes.size() / 2] / 1e6));
    }
  }
  return facts;
}

// The last `count` forward groups that backward gathers again (the root group, gathered
// first, is a knob of its own).
std::set<std::string> LastGroups(const GraphFacts& facts, int count) {
  std::set<std::string> groups;
  for (auto it = facts.forward_groups.rbegin(); it != facts.forward_groups.rend() && count > 0; ++it) {
    if (it->empty() || !facts.regathered.count(*it)) continue;
    groups.insert(*it);
    --count;
  }
  return groups;
}

// Drops per-gather distances that say nothing (equal to the uniform one, or for
// backward gathers that keeping removed), so equal plans have equal text.
void Normalize(StrategyKnobs& knobs) {
  for (auto it = knobs.per_gather.begin(); it != knobs.per_gather.end();) {
    bool kept_backward = false;
    for (const std::string& group : knobs.keep) {
      kept_backward |= it->first == absl::StrCat(group.empty() ? "root" : group, ".bwd");
    }
    if (it->second == knobs.prefetch || kept_backward || knobs.prefetch < 0) {
      it = knobs.per_gather.erase(it);
    } else {
      ++it;
    }
  }
}

struct Tried {
  StrategyKnobs knobs;
  PlanEvaluation evaluation;
  std::string origin;
};

// Strictly better for the search: fits first, then time, then peak; among plans that do
// not fit, the smaller reachable peak.
bool Better(const PlanEvaluation& a, const PlanEvaluation& b) {
  if (a.status.ok() != b.status.ok()) return a.status.ok();
  if (!a.status.ok()) return false;
  if (a.fits != b.fits) return a.fits;
  if (a.fits) {
    if (a.prediction.step_seconds != b.prediction.step_seconds) {
      return a.prediction.step_seconds < b.prediction.step_seconds;
    }
    return a.prediction.peak_bytes < b.prediction.peak_bytes;
  }
  if (a.pruned != b.pruned) return !a.pruned;
  return a.reachable_peak() < b.reachable_peak();
}

struct Move {
  StrategyKnobs knobs;
  std::string origin;
};

// Tier 0: schedule moves (a reordering: cheap to evaluate); tier 1: structural ones.
std::vector<Move> Neighbours(const StrategyKnobs& knobs, const PlanEvaluation& evaluation, const GraphFacts& facts,
                             const SearchOptions& options, int64_t budget, int tier) {
  std::vector<Move> moves;
  auto add = [&](StrategyKnobs next, std::string origin) {
    Normalize(next);
    moves.push_back({std::move(next), std::move(origin)});
  };
  // Memory matters when the plan needs recompute to fit, or does not fit at all.
  const bool memory_bound = evaluation.before_recompute.peak_bytes > budget;
  if (tier == 0 && knobs.prefetch < 0) {
    for (int prefetch : {0, 1}) {
      StrategyKnobs next = knobs;
      next.prefetch = prefetch;
      add(next, absl::StrCat("overlap scheduling, prefetch ", prefetch));
    }
  } else if (tier == 0) {
    std::set<std::string> done;
    int count = 0;
    for (const auto& [key, stall] : evaluation.exposed_gathers) {
      if (count >= 3 || !done.insert(key).second) continue;
      ++count;
      int distance = knobs.DistanceOf(key);
      if (distance >= options.max_prefetch) continue;
      StrategyKnobs next = knobs;
      next.SetDistance(key, distance + 1);
      add(next, absl::StrFormat("prefetch %s %d -> %d (stalls %.2f ms)", key, distance, distance + 1, stall * 1e3));
    }
    if (memory_bound) {
      done.clear();
      count = 0;
      for (const std::string& key : evaluation.inflight_at_peak) {
        if (count >= 4 || !done.insert(key).second) continue;
        ++count;
        int distance = knobs.DistanceOf(key);
        if (distance <= 0) continue;
        StrategyKnobs next = knobs;
        next.SetDistance(key, distance - 1);
        add(next, absl::StrFormat("prefetch %s %d -> %d (in flight at the peak)", key, distance, distance - 1));
      }
      if (knobs.max_inflight_mb == 0 && facts.largest_gather_mb > 0) {
        StrategyKnobs next = knobs;
        next.max_inflight_mb = std::ceil(1.5 * facts.largest_gather_mb);
        add(next, "cap in-flight gathers at 1.5 of the largest");
      }
    }
    if (knobs.max_inflight_mb > 0) {
      StrategyKnobs next = knobs;
      next.max_inflight_mb = 0;
      add(next, "no in-flight cap");
    }
    if (knobs.prefetch < options.max_prefetch) {
      StrategyKnobs next = knobs;
      next.prefetch = knobs.prefetch + 1;
      add(next, absl::StrCat("prefetch ", knobs.prefetch + 1, " everywhere else"));
    }
    if (knobs.prefetch > 0) {
      StrategyKnobs next = knobs;
      next.prefetch = knobs.prefetch - 1;
      add(next, absl::StrCat("prefetch ", knobs.prefetch - 1, " everywhere else"));
    }
  }
  if (tier == 0) return moves;
  // Keep one more of the last groups gathered, or one fewer; the root group on its own.
  std::set<std::string> suffix;
  for (auto it = facts.forward_groups.rbegin(); it != facts.forward_groups.rend(); ++it) {
    if (it->empty() || !facts.regathered.count(*it)) continue;
    if (knobs.keep.count(*it)) {
      suffix.insert(*it);
      continue;
    }
    StrategyKnobs next = knobs;
    next.keep.insert(*it);
    add(next, absl::StrCat("keep ", *it, " gathered for backward"));
    break;
  }
  for (const std::string& group : facts.forward_groups) {  // the earliest kept one
    if (!suffix.count(group)) continue;
    StrategyKnobs next = knobs;
    next.keep.erase(group);
    add(next, absl::StrCat("re-gather ", group, " in backward"));
    break;
  }
  if (facts.regathered.count("")) {
    StrategyKnobs next = knobs;
    bool kept = next.keep.erase("") > 0;
    if (!kept) next.keep.insert("");
    add(next, kept ? "re-gather the root group in backward" : "keep the root group gathered for backward");
  }
  if (facts.bucket_sizes.size() > 1) {
    // Per kind: buckets on or off, and an existing bucket limit doubled or halved (the
    // grid's size is a guess; the best one depends on the budget).
    auto bucket_moves = [&](double StrategyKnobs::*size, const char* kind) {
      StrategyKnobs next = knobs;
      next.*size = knobs.*size > 0 ? 0 : facts.bucket_sizes[1];
      add(next, absl::StrCat(next.*size > 0 ? "bucket " : "no buckets for ", kind));
      if (knobs.*size <= 0) return;
      for (double factor : {2.0, 0.5}) {
        next = knobs;
        next.*size = std::ceil(knobs.*size * factor);
        if (next.*size == knobs.*size) continue;
        add(next, absl::StrFormat("%s buckets of %g MB", kind, next.*size));
      }
    };
    bucket_moves(&StrategyKnobs::bucket_all_gather_mb, "all-gathers");
    bucket_moves(&StrategyKnobs::bucket_reduce_scatter_mb, "reduce-scatters");
  }
  return moves;
}

StrategyCandidate ToCandidate(const Tried& tried, int64_t budget, const CostModel& model) {
  StrategyCandidate candidate;
  const PlanEvaluation& e = tried.evaluation;
  // Pipelines name builtin profiles; a profile loaded from a file is named by its `name`.
  candidate.pipeline = PlanPipeline(tried.knobs, e.recomputed ? budget : 0, model);
  candidate.origin = tried.origin;
  candidate.evaluated = e.status.ok();
  candidate.prediction = e.prediction;
  candidate.prediction.events.clear();
  candidate.fits = e.fits;
  candidate.recomputed_nodes = e.recomputed_nodes;
  if (!e.status.ok()) {
    candidate.note = std::string(e.status.message());
  } else if (e.pruned) {
    candidate.note = "pruned: cannot beat the best";
  } else if (!e.fits && e.peak_floor >= 0) {
    candidate.note = absl::StrFormat("over budget: %.3f MB with every activation recomputed", e.peak_floor / 1e6);
  } else if (!e.fits) {
    candidate.note = "over budget";
  }
  return candidate;
}

// The search at one budget with a given evaluator (shared by the frontier's budgets).
// `seeds` join the grid (the frontier passes the plans chosen at smaller budgets, which
// fit this one too); the chosen setting is stored in `chosen_knobs` when given.
absl::StatusOr<StrategyPlan> SearchWith(PlanEvaluator& evaluator, const Module& module, const Graph& graph,
                                        const CostModel& model, int64_t memory_budget_bytes,
                                        const SearchOptions& options, const GraphFacts& facts,
                                        const SimulationResult& baseline, bool materialize,
                                        const std::vector<StrategyKnobs>& seeds = {},
                                        StrategyKnobs* chosen_knobs = nullptr) {
  auto begin = std::chrono::steady_clock::now();
  StrategyPlan plan;
  plan.baseline = baseline;
  plan.budget_bytes = memory_budget_bytes > 0 ? memory_budget_bytes : model.profile().memory_bytes;
  const int64_t budget = plan.budget_bytes;
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, threads);

  std::vector<Tried> tried;
  std::set<std::string> seen;
  // Stage 1: the grid, without recompute.
  std::vector<Move> grid;
  for (int keep_last : options.keep_last) {
    std::set<std::string> keep = LastGroups(facts, keep_last);
    if (keep_last > 0 && static_cast<int>(keep.size()) < keep_last) continue;
    for (double bucket_mb : facts.bucket_sizes) {
      for (int prefetch : options.prefetch) {
        StrategyKnobs knobs;
        knobs.keep = keep;
        knobs.bucket_all_gather_mb = bucket_mb;
        knobs.bucket_reduce_scatter_mb = bucket_mb;
        knobs.prefetch = prefetch;
        if (seen.insert(KnobsPipeline(knobs)).second) grid.push_back({knobs, "grid"});
      }
    }
  }
  for (const StrategyKnobs& seed : seeds) {
    if (seen.insert(KnobsPipeline(seed)).second) grid.push_back({seed, "chosen at a smaller budget"});
  }
  std::vector<StrategyKnobs> settings;
  for (const Move& move : grid) settings.push_back(move.knobs);
  std::vector<PlanEvaluation> first = evaluator.EvaluateAll(settings, budget, -kInfinity, threads);
  for (size_t i = 0; i < grid.size(); ++i) {
    MAGI_RETURN_IF_ERROR(first[i].status);
    tried.push_back({grid[i].knobs, first[i], grid[i].origin});
  }
  // Stage 2: best time first, recompute where over budget, until nothing left can beat
  // the best that fits.
  std::vector<size_t> order(grid.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tried[a].evaluation.prediction.step_seconds < tried[b].evaluation.prediction.step_seconds;
  });
  auto best_time = [&] {
    double best = kInfinity;
    for (const Tried& t : tried) {
      if (t.evaluation.fits) best = std::min(best, t.evaluation.prediction.step_seconds);
    }
    return best;
  };
  if (options.allow_recompute) {
    size_t cursor = 0;
    while (cursor < order.size()) {
      std::vector<size_t> batch;
      double bound = best_time();
      for (; cursor < order.size() && static_cast<int>(batch.size()) < threads; ++cursor) {
        const PlanEvaluation& e = tried[order[cursor]].evaluation;
        if (e.fits) continue;
        if (e.prediction.step_seconds >= bound) {
          cursor = order.size();
          break;
        }
        batch.push_back(order[cursor]);
      }
      if (batch.empty()) break;
      std::vector<StrategyKnobs> batch_settings;
      for (size_t index : batch) batch_settings.push_back(tried[index].knobs);
      std::vector<PlanEvaluation> results = evaluator.EvaluateAll(batch_settings, budget, bound, threads);
      for (size_t j = 0; j < batch.size(); ++j) {
        MAGI_RETURN_IF_ERROR(results[j].status);
        tried[batch[j]].evaluation = results[j];
      }
    }
  }
  // Grid points still "over budget" without a recompute attempt could not beat the best.
  for (Tried& t : tried) {
    if (!t.evaluation.fits && options.allow_recompute && t.evaluation.peak_floor < 0) t.evaluation.pruned = true;
  }
  size_t current = 0;
  for (size_t i = 1; i < tried.size(); ++i) {
    if (Better(tried[i].evaluation, tried[current].evaluation)) current = i;
  }

  // Stage 3: local search, from the best grid point and, when it is not the fastest
  // grid point, from the fastest one too (whose memory the search then brings down).
  // Schedule moves first; the structural ones (a copy of the module each) only where no
  // schedule move improves.
  auto local_search = [&](size_t start) -> absl::StatusOr<size_t> {
    size_t at = start;
    std::set<std::string> visited = {KnobsPipeline(tried[start].knobs)};
    for (int round = 0; round < options.max_rounds; ++round) {
      bool improved = false;
      for (int tier = 0; tier < 2 && !improved; ++tier) {
        std::vector<Move> moves;
        for (Move& move : Neighbours(tried[at].knobs, tried[at].evaluation, facts, options, budget, tier)) {
          if (visited.insert(KnobsPipeline(move.knobs)).second) moves.push_back(std::move(move));
        }
        if (moves.empty()) continue;
        ++plan.rounds;
        std::vector<StrategyKnobs> move_settings;
        for (const Move& move : moves) move_settings.push_back(move.knobs);
        const PlanEvaluation& now = tried[at].evaluation;
        // Nothing that cannot beat the best plan found so far (by any start) by
        // min_improvement is worth a recompute.
        double bound = std::min(now.fits ? now.prediction.step_seconds : kInfinity, best_time()) *
                       (1 - options.min_improvement);
        std::vector<PlanEvaluation> results = evaluator.EvaluateAll(move_settings, budget, bound, threads);
        int best_move = -1;
        for (size_t j = 0; j < moves.size(); ++j) {
          MAGI_RETURN_IF_ERROR(results[j].status);
          tried.push_back({moves[j].knobs, results[j], moves[j].origin});
          if (best_move < 0 || Better(results[j], tried[best_move].evaluation)) {
            best_move = static_cast<int>(tried.size()) - 1;
          }
        }
        if (best_move >= 0 && Better(tried[best_move].evaluation, tried[at].evaluation)) {
          at = static_cast<size_t>(best_move);
          improved = true;
        }
      }
      if (!improved) break;
    }
    return at;
  };
  if (options.local_search) {
    size_t fastest = 0;
    for (size_t i = 1; i < grid.size(); ++i) {
      if (tried[i].evaluation.before_recompute.step_seconds < tried[fastest].evaluation.before_recompute.step_seconds) {
        fastest = i;
      }
    }
    // With seeds (the frontier), the best grid point is a start of its own: a seed that
    // recomputes is often a worse basin than a grid point the local search can shape.
    size_t best_grid = 0;
    for (size_t i = 1; i < grid.size(); ++i) {
      if (grid[i].origin == "grid" && (grid[best_grid].origin != "grid" ||
                                       Better(tried[i].evaluation, tried[best_grid].evaluation))) {
        best_grid = i;
      }
    }
    std::vector<size_t> starts = {current};
    for (size_t start : {best_grid, fastest}) {
      if (std::find(starts.begin(), starts.end(), start) == starts.end()) starts.push_back(start);
    }
    for (size_t start : starts) {
      MAGI_ASSIGN_OR_RETURN(size_t reached, local_search(start));
      if (Better(tried[reached].evaluation, tried[current].evaluation)) current = reached;
    }
  }

  for (const Tried& t : tried) plan.candidates.push_back(ToCandidate(t, budget, model));
  // A plan's passes run for real on a fresh copy, and the copy's prediction.
  auto apply = [&](const StrategyKnobs& knobs, int64_t recompute_budget)
      -> absl::StatusOr<std::pair<std::unique_ptr<Module>, SimulationResult>> {
    std::unique_ptr<Module> copy = CloneModule(module);
    PassManager manager(/*verify_each=*/false);
    AddPlanPasses(knobs, recompute_budget, model, manager);
    MAGI_RETURN_IF_ERROR(manager.Run(*copy).status());
    MAGI_ASSIGN_OR_RETURN(SimulationResult simulated, Simulate(*copy->FindGraph(graph.name()), model));
    return std::make_pair(std::move(copy), std::move(simulated));
  };
  const Tried& best = tried[current];
  if (!best.evaluation.fits) {
    // The plan that came closest: the least peak over the settings tried, where recompute
    // could not fit rebuilt with every activation recomputed (a budget of exactly its
    // floor), so the figure and the pipeline named are ones a real pipeline reaches.
    const Tried* closest = nullptr;
    for (const Tried& t : tried) {
      if (!t.evaluation.status.ok() || t.evaluation.pruned) continue;
      if (closest == nullptr || t.evaluation.reachable_peak() < closest->evaluation.reachable_peak()) closest = &t;
    }
    if (closest == nullptr) return absl::InternalError("the strategy search evaluated no setting");
    const PlanEvaluation& e = closest->evaluation;
    const int64_t recompute_budget = e.peak_floor > 0 ? e.peak_floor : e.recomputed ? budget : 0;
    const std::string text = PlanPipeline(closest->knobs, recompute_budget, model);
    MAGI_ASSIGN_OR_RETURN(auto applied, apply(closest->knobs, recompute_budget));
    const SimulationResult reached = std::move(applied.second);
    return absl::FailedPreconditionError(absl::StrFormat(
        "no strategy fits %d bytes per rank: the smallest predicted peak the search reached is %d bytes (%.6f MB), "
        "with %s (graph as given: %d bytes)",
        budget, reached.peak_bytes, reached.peak_bytes / 1e6, text.empty() ? "the graph as given" : text,
        baseline.peak_bytes));
  }
  plan.chosen = plan.candidates[current];
  plan.pipeline = plan.chosen.pipeline;
  if (chosen_knobs != nullptr) *chosen_knobs = tried[current].knobs;
  if (materialize) {
    // The chosen plan's passes, run for real on a fresh copy: what the caller compiles.
    MAGI_ASSIGN_OR_RETURN(auto result,
                          apply(tried[current].knobs, tried[current].evaluation.recomputed ? budget : 0));
    std::unique_ptr<Module> optimized = std::move(result.first);
    SimulationResult applied = std::move(result.second);
    if (applied.step_seconds != plan.chosen.prediction.step_seconds ||
        applied.peak_bytes != plan.chosen.prediction.peak_bytes) {
      return absl::InternalError(absl::StrFormat(
          "strategy search: the chosen pipeline predicts %.6f ms and %d bytes when evaluated, but %.6f ms and %d "
          "bytes when run on a fresh copy: %s",
          plan.chosen.prediction.step_seconds * 1e3, plan.chosen.prediction.peak_bytes, applied.step_seconds * 1e3,
          applied.peak_bytes, plan.pipeline));
    }
    plan.chosen.prediction = std::move(applied);
    plan.optimized = std::move(optimized);
  }
  plan.evaluations = evaluator.evaluations();
  plan.recompute_runs = evaluator.recompute_runs();
  plan.variants = evaluator.variants_built();
  plan.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return plan;
}

}  // namespace

absl::StatusOr<StrategyPlan> SearchStrategy(const Module& module, const std::string& graph_name, const CostModel& model,
                                            int64_t memory_budget_bytes, const SearchOptions& options) {
  auto begin = std::chrono::steady_clock::now();
  const Graph* graph = module.FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("no graph @", graph_name));
  MAGI_ASSIGN_OR_RETURN(SimulationResult baseline, Simulate(*graph, model));
  GraphFacts facts = ReadFacts(*graph, options);
  PlanEvaluator evaluator(module, graph_name, model, options.allow_recompute);
  MAGI_ASSIGN_OR_RETURN(StrategyPlan plan,
                        SearchWith(evaluator, module, *graph, model, memory_budget_bytes, options, facts, baseline,
                                   /*materialize=*/true));
  plan.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return plan;
}

absl::StatusOr<std::vector<FrontierPoint>> SearchFrontier(const Module& module, const std::string& graph_name,
                                                          const CostModel& model, const std::vector<int64_t>& budgets,
                                                          const SearchOptions& options) {
  const Graph* graph = module.FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("no graph @", graph_name));
  MAGI_ASSIGN_OR_RETURN(SimulationResult baseline, Simulate(*graph, model));
  GraphFacts facts = ReadFacts(*graph, options);
  PlanEvaluator evaluator(module, graph_name, model, options.allow_recompute);
  // Smallest budget first: a plan that fits a budget fits every larger one, so each
  // search starts from the plans chosen below it too, and no point of the frontier is
  // slower than a point at a smaller budget.
  std::vector<size_t> order(budgets.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return budgets[a] < budgets[b]; });
  std::vector<FrontierPoint> points(budgets.size());
  std::vector<StrategyKnobs> seeds;
  for (size_t index : order) {
    FrontierPoint& point = points[index];
    point.budget_bytes = budgets[index];
    StrategyKnobs chosen;
    absl::StatusOr<StrategyPlan> plan =
        SearchWith(evaluator, module, *graph, model, budgets[index], options, facts, baseline, /*materialize=*/true,
                   seeds, &chosen);
    if (plan.ok()) {
      point.plan = *std::move(plan);
      point.plan.optimized.reset();
      seeds.push_back(chosen);
    } else if (plan.status().code() == absl::StatusCode::kFailedPrecondition) {
      point.status = plan.status();
    } else {
      return plan.status();
    }
  }
  // A plan found at one budget serves every budget its peak fits: each point takes the
  // fastest such plan (the local search from another start may have found it only at a
  // larger budget), so the step time never rises as the budget grows.
  for (FrontierPoint& point : points) {
    const FrontierPoint* best = point.status.ok() ? &point : nullptr;
    for (const FrontierPoint& other : points) {
      if (!other.status.ok() || other.plan.chosen.prediction.peak_bytes > point.budget_bytes) continue;
      const SimulationResult& p = other.plan.chosen.prediction;
      if (best == nullptr || p.step_seconds < best->plan.chosen.prediction.step_seconds ||
          (p.step_seconds == best->plan.chosen.prediction.step_seconds &&
           p.peak_bytes < best->plan.chosen.prediction.peak_bytes)) {
        best = &other;
      }
    }
    if (best == nullptr || best == &point) continue;
    const double own_seconds = point.status.ok() ? point.plan.search_seconds : 0;
    StrategyPlan taken = best->plan;
    taken.budget_bytes = point.budget_bytes;
    taken.search_seconds = own_seconds;
    taken.chosen.origin = absl::StrFormat("found at the %.6g GB budget", best->budget_bytes / 1e9);
    point.plan = std::move(taken);
    point.status = absl::OkStatus();
  }
  return points;
}

std::string FormatStrategyPlan(const StrategyPlan& plan) {
  auto row = [](const std::string& mark, const std::string& pipeline, const SimulationResult& p, bool evaluated,
                const std::string& origin, const std::string& note) {
    std::string tail = absl::StrCat(origin.empty() ? "" : "  [" + origin + "]", note.empty() ? "" : "  # " + note);
    if (!evaluated)
      return absl::StrFormat("%s %10s %10s %12s %10s %s%s\n", mark, "-", "-", "-", "-", pipeline, tail);
    return absl::StrFormat("%s %10.3f %10.3f %12.1f %9.1f%% %s%s\n", mark, p.step_seconds * 1e3,
                           p.exposed_communication_seconds * 1e3, p.peak_bytes / 1e6, 100 * p.overlap_fraction(),
                           pipeline, tail);
  };
  std::string out = absl::StrFormat("budget %.1f MB per rank; searched %d candidates (%d rounds of local search) in %.2f s\n",
                                    plan.budget_bytes / 1e6, plan.candidates.size(), plan.rounds, plan.search_seconds);
  absl::StrAppendFormat(&out, "  %10s %10s %12s %10s %s\n", "step_ms", "exposed_ms", "peak_MB", "overlap", "pipeline");
  out += row(" ", "(graph as given)", plan.baseline, true, "", "");
  bool marked = false;
  for (const StrategyCandidate& candidate : plan.candidates) {
    bool chosen = !marked && candidate.pipeline == plan.pipeline;
    marked |= chosen;
    out += row(chosen ? "*" : " ", candidate.pipeline, candidate.prediction, candidate.evaluated, candidate.origin,
               candidate.note);
  }
  absl::StrAppend(&out, "chosen: ", plan.pipeline, "\n");
  return out;
}

std::string FormatFrontier(const std::vector<FrontierPoint>& points) {
  // Budgets and peaks with 6 significant digits: GB-sized steps and MB-sized test graphs alike.
  std::string out = absl::StrFormat("%10s %10s %10s %10s %10s %8s  %s\n", "budget_GB", "step_ms", "exposed_ms",
                                    "peak_GB", "recomputed", "search_s", "pipeline");
  for (const FrontierPoint& point : points) {
    if (!point.status.ok()) {
      absl::StrAppendFormat(&out, "%10.6g %10s %10s %10s %10s %8s  (nothing fits: %s)\n", point.budget_bytes / 1e9,
                            "-", "-", "-", "-", "-", point.status.message());
      continue;
    }
    const SimulationResult& p = point.plan.chosen.prediction;
    absl::StrAppendFormat(&out, "%10.6g %10.3f %10.3f %10.6g %10d %8.2f  %s\n", point.budget_bytes / 1e9,
                          p.step_seconds * 1e3, p.exposed_communication_seconds * 1e3, p.peak_bytes / 1e9,
                          point.plan.chosen.recomputed_nodes, point.plan.search_seconds, point.plan.pipeline);
  }
  return out;
}

}  // namespace magi
