#include "magi/search/exhaustive_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "magi/ir/collectives.h"
#include "magi/passes/bucket_collectives.h"

namespace magi {

std::vector<StrategyKnobs> ExhaustiveSettings(const Graph& graph, const ExhaustiveSpace& space) {
  std::vector<std::string> forward_groups;  // program order
  std::set<std::string> seen, regathered;
  std::vector<int64_t> sizes;
  int64_t largest_gather = 0;
  for (const Node* node : graph.nodes()) {
    if (!IsCollectiveStart(node->op())) continue;
    sizes.push_back(BucketCollectives::BucketBytes(*node));
    if (node->op() != kAllGatherStartOp) continue;
    largest_gather = std::max(largest_gather, BucketCollectives::BucketBytes(*node));
    const std::string& group = node->annotations().module_path;
    if (node->annotations().phase == Phase::kBackward) {
      regathered.insert(group);
    } else if (seen.insert(group).second) {
      forward_groups.push_back(group);
    }
  }
  std::vector<std::string> groups;  // the ones keeping can change
  for (const std::string& group : forward_groups) {
    if (regathered.count(group)) groups.push_back(group);
  }
  std::vector<std::set<std::string>> keeps;
  if (space.all_subsets) {
    const int n = std::min<int>(static_cast<int>(groups.size()), 20);
    for (int mask = 0; mask < (1 << n); ++mask) {
      std::set<std::string> keep;
      for (int i = 0; i < n; ++i) {
        if (mask & (1 << i)) keep.insert(groups[i]);
      }
      keeps.push_back(keep);
    }
  } else {
    std::set<std::string> suffix;
    keeps.push_back(suffix);
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
      if (it->empty()) continue;
      suffix.insert(*it);
      keeps.push_back(suffix);
    }
    if (regathered.count("")) keeps.push_back({""});
  }
  std::vector<double> buckets = space.bucket_mb;
  if (buckets.empty()) {
    buckets = {0};
    if (!sizes.empty()) {
      std::nth_element(sizes.begin(), sizes.begin() + sizes.size() / 2, sizes.end());
      const double median_mb = std::ceil(sizes[sizes.size() / 2] / 1e6);
      buckets.push_back(2 * median_mb);
      buckets.push_back(4 * median_mb);
    }
  }
  std::vector<double> caps = space.max_inflight_mb;
  if (caps.empty()) {
    caps = {0};
    if (largest_gather > 0) {
      caps.push_back(std::ceil(1.5 * largest_gather / 1e6));
      caps.push_back(std::ceil(3 * largest_gather / 1e6));
    }
  }
  std::vector<StrategyKnobs> settings;
  std::set<std::string> texts;
  for (const std::set<std::string>& keep : keeps) {
    for (double gather_mb : buckets) {
      for (double scatter_mb : buckets) {
        for (int prefetch : space.prefetch) {
          for (double cap : caps) {
            StrategyKnobs knobs;
            knobs.keep = keep;
            knobs.bucket_all_gather_mb = gather_mb;
            knobs.bucket_reduce_scatter_mb = scatter_mb;
            knobs.prefetch = prefetch;
            knobs.max_inflight_mb = prefetch < 0 ? 0 : cap;  // no schedule: no cap
            if (texts.insert(KnobsPipeline(knobs)).second) settings.push_back(knobs);
          }
        }
      }
    }
  }
  return settings;
}

absl::StatusOr<ExhaustiveResult> ExhaustiveBest(PlanEvaluator& evaluator, const std::vector<StrategyKnobs>& settings,
                                                int64_t budget_bytes, int threads) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  ExhaustiveResult result;
  result.settings = static_cast<int>(settings.size());
  std::vector<PlanEvaluation> evaluations = evaluator.EvaluateAll(settings, budget_bytes, -kInfinity, threads);
  for (const PlanEvaluation& evaluation : evaluations) {
    if (!evaluation.status.ok()) return evaluation.status;
  }
  std::vector<size_t> order(settings.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return evaluations[a].prediction.step_seconds < evaluations[b].prediction.step_seconds;
  });
  auto better = [&](const PlanEvaluation& a, const PlanEvaluation& b) {
    if (a.prediction.step_seconds != b.prediction.step_seconds) {
      return a.prediction.step_seconds < b.prediction.step_seconds;
    }
    return a.prediction.peak_bytes < b.prediction.peak_bytes;
  };
  int best = -1;
  auto consider = [&](size_t index) {
    if (!evaluations[index].fits) return;
    if (best < 0 || better(evaluations[index], evaluations[best]) ||
        (!better(evaluations[best], evaluations[index]) && static_cast<int>(index) < best)) {
      best = static_cast<int>(index);
    }
  };
  for (size_t i = 0; i < settings.size(); ++i) consider(i);
  // Over budget: recompute, fastest first, while the time before recompute can still
  // beat (or tie) the best that fits.
  size_t cursor = 0;
  const int batch_size = std::max(1, threads);
  while (cursor < order.size()) {
    const double bound = best < 0 ? kInfinity : evaluations[best].prediction.step_seconds;
    std::vector<size_t> batch;
    for (; cursor < order.size() && static_cast<int>(batch.size()) < batch_size; ++cursor) {
      const PlanEvaluation& e = evaluations[order[cursor]];
      if (e.fits) continue;
      if (e.prediction.step_seconds > bound) {
        cursor = order.size();
        break;
      }
      batch.push_back(order[cursor]);
    }
    if (batch.empty()) break;
    std::vector<StrategyKnobs> batch_settings;
    for (size_t index : batch) batch_settings.push_back(settings[index]);
    std::vector<PlanEvaluation> recomputed = evaluator.EvaluateAll(batch_settings, budget_bytes, kInfinity, threads);
    for (size_t j = 0; j < batch.size(); ++j) {
      if (!recomputed[j].status.ok()) return recomputed[j].status;
      evaluations[batch[j]] = recomputed[j];
      ++result.recomputed;
      consider(batch[j]);
    }
  }
  if (best >= 0) {
    result.found = true;
    result.knobs = settings[best];
    result.best = evaluations[best];
  }
  return result;
}

}  // namespace magi
