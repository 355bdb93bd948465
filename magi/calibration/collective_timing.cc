#include "magi/calibration/collective_timing.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/calibration/cuda_timing.h"
#include "magi/calibration/rank_agreement.h"
#include "magi/ir/collectives.h"

namespace magi::calibration {

absl::StatusOr<std::optional<Timing>> MeasureCollective(const TorchKernelCalibratorOptions& options, FailureLog& log,
                                                        const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                                        std::vector<CollectiveIssue> issues) {
  auto it = options.communicators.find(plan.group);
  // Same on every rank (the same communicators for the same graph): nobody measures it.
  if (it == options.communicators.end() || it->second == nullptr) {
    return log.Unmeasurable(*plan.node, absl::StrCat("no communicator for group '", plan.group, "'"));
  }
  Communicator& communicator = *it->second;
  std::vector<at::Tensor> inputs;
  for (int s : plan.args[0].slots) inputs.push_back(slots[s]);
  if (issues.empty()) issues.emplace_back();
  for (CollectiveIssue& issue : issues) {
    issue.compute_before_seconds =
        std::min(std::max(0.0, issue.compute_before_seconds), options.max_compute_before_seconds);
    // On CUDA the compute between a start and its wait runs on another stream than
    // NCCL's kernels: not what shares cores with the collective, and not replayed here.
    issue.compute_during_seconds =
        options.device.is_cuda()
            ? 0.0
            : std::min(std::max(0.0, issue.compute_during_seconds), options.max_compute_before_seconds);
  }
  std::sort(issues.begin(), issues.end(), [](const CollectiveIssue& a, const CollectiveIssue& b) {
    return std::make_pair(a.compute_before_seconds, a.compute_during_seconds) <
           std::make_pair(b.compute_before_seconds, b.compute_during_seconds);
  });
  struct Group {
    double before = 0, during = 0;  // the mean compute of its issues
    double weight = 0;              // how many issues it stands for
    int64_t iterations = 0, overlapped_iterations = 0;
    std::vector<double> samples;
  };
  constexpr size_t kIssueGroups = 6;
  const size_t group_count = std::min(issues.size(), kIssueGroups);
  std::vector<Group> groups(group_count);
  for (size_t i = 0; i < issues.size(); ++i) {
    Group& group = groups[i * group_count / issues.size()];
    group.before += issues[i].compute_before_seconds;
    group.during += issues[i].compute_during_seconds;
    group.weight += 1;
  }
  bool any_compute = false;
  for (Group& group : groups) {
    group.before /= group.weight;
    group.during /= group.weight;
    any_compute = any_compute || group.before > 0 || group.during > 0;
  }
  // A step's kind of compute: matmuls that allocate a fresh 256 KB result each.
  at::Tensor a = at::rand({256, 128}, at::TensorOptions().device(options.device));
  at::Tensor b = at::rand({128, 256}, at::TensorOptions().device(options.device));
  if (any_compute) {
    // The same work on every rank (their mean time per matmul), so the drift between
    // ranks is the real one.
    constexpr int kProbe = 8;
    for (int k = 0; k < 2; ++k) (void)at::mm(a, b);
    Synchronize(options.device);
    auto probe_start = Clock::now();
    for (int k = 0; k < kProbe; ++k) (void)at::mm(a, b);
    Synchronize(options.device);
    MAGI_ASSIGN_OR_RETURN(std::vector<double> probe,
                          GatherOver(communicator, SecondsSince(probe_start) / kProbe, options.device));
    double per_iteration = 0;
    for (double p : probe) per_iteration += p / static_cast<double>(probe.size());
    auto iterations_for = [&](double seconds) -> int64_t {
      return seconds > 0 ? std::max<int64_t>(1, std::llround(seconds / std::max(per_iteration, 1e-9))) : 0;
    };
    for (Group& group : groups) {
      group.iterations = iterations_for(group.before);
      group.overlapped_iterations = iterations_for(group.during);
    }
  }
  // Every group gets a run (each must be in the mean).
  int runs = options.collective_runs > 0 ? std::max<int>(options.collective_runs, group_count) : 0;
  Clock::time_point timed_start = Clock::now();
  for (int run = 0; run <= runs; ++run) {
    if (run == 1) timed_start = Clock::now();
    Group& group = groups[run == 0 ? 0 : (run - 1) % groups.size()];
    for (int64_t k = 0; k < group.iterations; ++k) (void)at::mm(a, b);
    Synchronize(options.device);
    auto start = Clock::now();
    absl::StatusOr<std::unique_ptr<CollectiveHandle>> handle = communicator.Start(plan.collective, inputs, plan.reduce_op);
    if (!handle.ok()) {
      return absl::Status(handle.status().code(), absl::StrCat(Where(*plan.node), ": ", handle.status().message()));
    }
    for (int64_t k = 0; k < group.overlapped_iterations; ++k) (void)at::mm(a, b);
    const Clock::time_point wait_called = Clock::now();
    absl::StatusOr<std::vector<at::Tensor>> results = (*handle)->Wait();
    if (!results.ok()) {
      return absl::Status(results.status().code(), absl::StrCat(Where(*plan.node), ": ", results.status().message()));
    }
    Synchronize(options.device);
    double seconds = SecondsSince(start);
    if (group.overlapped_iterations > 0) {
      if (std::optional<CollectiveTiming> timing = (*handle)->timing(); timing && timing->done <= wait_called) {
        seconds = std::chrono::duration<double>(timing->done - start).count();  // done before the wait
      }
    }
    if (run > 0) group.samples.push_back(seconds);
    if (run == options.collective_runs && run > 0 && options.device.is_cpu() &&
        options.max_collective_runs > options.collective_runs) {
      // On shared CPU cores a run either takes the transport's time or stalls for a
      // scheduler slice (0.2-0.6 ms against 3-8 ms in the tiny step's all-gathers), so
      // a mean of 18 runs moved the step's prediction by +-20% between identical first
      // runs. More runs, as many as seconds_per_collective allows at the slowest rank's
      // pace: the same count on every rank (they run in lockstep).
      MAGI_ASSIGN_OR_RETURN(std::vector<double> paces,
                            GatherOver(communicator, SecondsSince(timed_start) / options.collective_runs, options.device));
      double pace = 1e-9;
      for (double rank_pace : paces) pace = std::max(pace, rank_pace);
      const int fewest = std::max<int>(options.collective_runs, group_count);
      runs = static_cast<int>(std::clamp<double>(std::floor(options.seconds_per_collective / pace), fewest,
                                                 std::max(fewest, options.max_collective_runs)));
    }
  }
  double seconds = 0, weight = 0;
  int timed = 0;
  for (const Group& group : groups) {
    if (group.samples.empty()) continue;
    seconds += group.weight * Mean(group.samples);
    weight += group.weight;
    timed += static_cast<int>(group.samples.size());
  }
  return Timing{weight > 0 ? seconds / weight : 0.0, timed};
}

bool IsOneRankCollectiveOnCuda(const TorchKernelCalibratorOptions& options, const Node& node) {
  if (!options.device.is_cuda() || !IsCollectiveStart(node.op())) return false;
  const Attribute* group = node.FindArg("group");
  if (group == nullptr || group->kind() != AttrKind::kString) return false;
  auto it = options.communicators.find(group->as_string());
  return it != options.communicators.end() && it->second != nullptr && it->second->size() == 1;
}

}  // namespace magi::calibration
