#include "magi/search/strategy_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/printer.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

std::string BasePipeline(bool reshard, double bucket_mb, int prefetch) {
  std::string pipeline = absl::StrCat("reshard-after-forward{mode=", reshard ? "reshard" : "keep", "}");
  if (bucket_mb > 0) absl::StrAppend(&pipeline, ",bucket-collectives{max_mb=", bucket_mb, "}");
  if (prefetch >= 0) absl::StrAppend(&pipeline, ",schedule-overlap{prefetch=", prefetch, "}");
  return pipeline;
}

// Pipelines name builtin profiles; a profile loaded from a file is named by its `name`.
std::string RecomputeSpec(int64_t budget_bytes, const CostModel& model) {
  return absl::StrCat("auto-recompute{budget_mb=", absl::StrFormat("%.6f", budget_bytes / 1e6),
                      ",profile=", model.profile().name, "}");
}

}  // namespace

absl::StatusOr<StrategyPlan> SearchStrategy(const Module& module, const std::string& graph_name, const CostModel& model,
                                            const SearchOptions& options) {
  auto begin = std::chrono::steady_clock::now();
  const Graph* graph = module.FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("no graph @", graph_name));
  StrategyPlan plan;
  plan.budget_bytes = options.memory_budget_bytes > 0 ? options.memory_budget_bytes : model.profile().memory_bytes;
  MAGI_ASSIGN_OR_RETURN(plan.baseline, Simulate(*graph, model));

  // Stage 1: every base pipeline, run on its own copy and simulated, on `threads` threads
  // (candidates are independent; results land in enumeration order, so the outcome does
  // not depend on the thread count).
  std::vector<double> bucket_sizes = options.bucket_mb;
  if (bucket_sizes.empty()) {
    std::vector<int64_t> sizes;
    for (const Node* node : graph->nodes()) {
      if (IsCollectiveStart(node->op())) sizes.push_back(BucketCollectives::BucketBytes(*node));
    }
    bucket_sizes = {0};
    if (!sizes.empty()) {
      // 2x and 4x the median collective (whole megabytes, so the pipeline text stays short):
      // typical neighbours fuse in pairs or fours.
      std::nth_element(sizes.begin(), sizes.begin() + sizes.size() / 2, sizes.end());
      double mb = std::ceil(sizes[sizes.size() / 2] / 1e6);
      bucket_sizes.push_back(2 * mb);
      bucket_sizes.push_back(4 * mb);
    }
  }
  for (bool reshard : options.reshard_after_forward) {
    for (double bucket_mb : bucket_sizes) {
      for (int prefetch : options.prefetch) {
        StrategyCandidate candidate;
        candidate.pipeline = BasePipeline(reshard, bucket_mb, prefetch);
        plan.candidates.push_back(std::move(candidate));
      }
    }
  }
  std::vector<std::unique_ptr<Module>> copies(plan.candidates.size());
  std::vector<absl::Status> statuses(plan.candidates.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t index = next++; index < plan.candidates.size(); index = next++) {
      StrategyCandidate& candidate = plan.candidates[index];
      copies[index] = CloneModule(module);
      statuses[index] = RunPassPipeline(candidate.pipeline, *copies[index], /*verify_each=*/false).status();
      if (!statuses[index].ok()) continue;
      absl::StatusOr<SimulationResult> prediction = Simulate(*copies[index]->FindGraph(graph_name), model);
      if (!prediction.ok()) {
        statuses[index] = prediction.status();
        continue;
      }
      candidate.prediction = *std::move(prediction);
      candidate.evaluated = true;
      candidate.fits = candidate.prediction.peak_bytes <= plan.budget_bytes;
    }
  };
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(plan.candidates.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& thread : pool) thread.join();
  for (const absl::Status& status : statuses) MAGI_RETURN_IF_ERROR(status);
  struct Evaluated {
    std::unique_ptr<Module> module;
  };
  std::vector<Evaluated> evaluated;
  for (auto& copy : copies) evaluated.push_back({std::move(copy)});

  // Stage 2: best first by time; recompute where over budget; stop when no later
  // candidate can beat the best fitting one.
  std::vector<size_t> order(plan.candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plan.candidates[a].prediction.step_seconds < plan.candidates[b].prediction.step_seconds;
  });
  // Different pipelines can make the same graph (a bucket limit below every pair of
  // neighbours fuses nothing); evaluate each graph once.
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const SimulationResult& a = plan.candidates[i].prediction;
      const SimulationResult& b = plan.candidates[j].prediction;
      if (!plan.candidates[j].note.empty() || a.step_seconds != b.step_seconds || a.peak_bytes != b.peak_bytes ||
          a.exposed_communication_seconds != b.exposed_communication_seconds) {
        continue;
      }
      if (PrintModule(*evaluated[i].module) == PrintModule(*evaluated[j].module)) {
        plan.candidates[i].note = absl::StrCat("same graph as ", plan.candidates[j].pipeline);
        break;
      }
    }
  }
  int best = -1;
  // Over-budget candidates whose recompute could not fit: the least peak recompute can
  // reach for each (every activation recomputed), to report the closest plan.
  std::vector<int64_t> recompute_floor(plan.candidates.size(), -1);
  for (size_t index : order) {
    StrategyCandidate& candidate = plan.candidates[index];
    if (absl::StartsWith(candidate.note, "same graph as")) continue;
    if (best >= 0 && candidate.prediction.step_seconds >= plan.candidates[best].prediction.step_seconds) {
      if (!candidate.fits) candidate.note = "pruned: cannot beat the best";
      continue;
    }
    if (!candidate.fits && options.allow_recompute) {
      AutoRecompute recompute(plan.budget_bytes, model);
      Module& copy = *evaluated[index].module;
      absl::StatusOr<bool> changed = recompute.Run(copy);
      if (changed.ok()) {
        candidate.pipeline = absl::StrCat(candidate.pipeline, ",", RecomputeSpec(plan.budget_bytes, model));
        MAGI_ASSIGN_OR_RETURN(candidate.prediction, Simulate(*copy.FindGraph(graph_name), model));
        candidate.recomputed_nodes = recompute.report().recomputed;
        candidate.fits = candidate.prediction.peak_bytes <= plan.budget_bytes;
      } else if (changed.status().code() == absl::StatusCode::kFailedPrecondition) {
        candidate.note = absl::StrFormat("over budget: %.3f MB with every activation recomputed",
                                         recompute.report().peak_floor / 1e6);
        if (recompute.report().peak_floor > 0) recompute_floor[index] = recompute.report().peak_floor;
      } else {
        return changed.status();
      }
    }
    if (!candidate.fits) {
      if (candidate.note.empty()) candidate.note = "over budget";
      continue;
    }
    if (best < 0 || candidate.prediction.step_seconds < plan.candidates[best].prediction.step_seconds ||
        (candidate.prediction.step_seconds == plan.candidates[best].prediction.step_seconds &&
         static_cast<int>(index) < best)) {
      best = static_cast<int>(index);
    }
  }
  plan.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (best < 0) {
    // The plan that came closest: the least peak over the candidates as evaluated and,
    // where recompute was tried, rebuilt with every activation recomputed (a budget of
    // exactly its floor), so the figure is one a real pipeline reaches.
    int closest = -1;
    int64_t closest_peak = INT64_MAX;
    for (size_t index = 0; index < plan.candidates.size(); ++index) {
      const StrategyCandidate& candidate = plan.candidates[index];
      if (absl::StartsWith(candidate.note, "same graph as")) continue;
      int64_t peak = recompute_floor[index] > 0 ? recompute_floor[index] : candidate.prediction.peak_bytes;
      if (peak < closest_peak) {
        closest_peak = peak;
        closest = static_cast<int>(index);
      }
    }
    if (closest < 0) return absl::InternalError("the strategy search evaluated no candidate");
    StrategyCandidate reached = plan.candidates[closest];
    if (recompute_floor[closest] > 0) {
      AutoRecompute recompute(recompute_floor[closest], model);
      Module& copy = *evaluated[closest].module;
      MAGI_RETURN_IF_ERROR(recompute.Run(copy).status());
      reached.pipeline = absl::StrCat(reached.pipeline, ",", RecomputeSpec(recompute_floor[closest], model));
      MAGI_ASSIGN_OR_RETURN(reached.prediction, Simulate(*copy.FindGraph(graph_name), model));
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "no strategy fits %d bytes per rank: the smallest predicted peak the search reached is %d bytes (%.6f MB), "
        "with %s (graph as given: %d bytes)",
        plan.budget_bytes, reached.prediction.peak_bytes, reached.prediction.peak_bytes / 1e6, reached.pipeline,
        plan.baseline.peak_bytes));
  }
  plan.chosen = plan.candidates[best];
  plan.pipeline = plan.chosen.pipeline;
  plan.optimized = std::move(evaluated[best].module);
  return plan;
}

std::string FormatStrategyPlan(const StrategyPlan& plan) {
  auto row = [](const std::string& mark, const std::string& pipeline, const SimulationResult& p, bool evaluated,
                const std::string& note) {
    if (!evaluated)
      return absl::StrFormat("%s %-10s %-10s %-12s %-10s %s  %s\n", mark, "-", "-", "-", "-", pipeline, note);
    return absl::StrFormat("%s %10.3f %10.3f %12.1f %9.1f%% %s%s%s\n", mark, p.step_seconds * 1e3,
                           p.exposed_communication_seconds * 1e3, p.peak_bytes / 1e6, 100 * p.overlap_fraction(),
                           pipeline, note.empty() ? "" : "  # ", note);
  };
  std::string out = absl::StrFormat("budget %.1f MB per rank; searched %d candidates in %.2f s\n",
                                    plan.budget_bytes / 1e6, plan.candidates.size(), plan.search_seconds);
  absl::StrAppendFormat(&out, "  %10s %10s %12s %10s %s\n", "step_ms", "exposed_ms", "peak_MB", "overlap", "pipeline");
  out += row(" ", "(graph as given)", plan.baseline, true, "");
  for (const StrategyCandidate& candidate : plan.candidates) {
    out += row(candidate.pipeline == plan.pipeline ? "*" : " ", candidate.pipeline, candidate.prediction,
               candidate.evaluated, candidate.note);
  }
  absl::StrAppend(&out, "chosen: ", plan.pipeline, "\n");
  return out;
}

}  // namespace magi
