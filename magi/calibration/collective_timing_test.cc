// Collective micro-runs on CPU (collective_timing.h): how many runs, in lockstep, per issue
// group.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/calibration/test_steps.h"
#include "magi/calibration/torch_kernel_calibrator.h"
#include "magi/ir/parser.h"

namespace magi::calibration {
namespace {

// kStep's all-gather micro-run on two ranks with `issues` (collective_runs runs, then up
// to 12 as seconds_per_collective allows): each rank's times and how many collectives the
// ranks ran.
struct GatherRuns {
  absl::StatusOr<std::vector<KernelTime>> times[2];
  int collectives = 0;
};
GatherRuns MicroRunTheGather(const std::vector<CollectiveIssue>& issues, int collective_runs,
                             double seconds_per_collective) {
  GatherRuns result;
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  if (!module.ok()) {
    result.times[0] = result.times[1] = module.status();
    return result;
  }
  std::vector<KernelRequest> requests;
  for (const Node* node : (*module)->FindGraph("g")->nodes()) {
    if (node->op() == "magi::all_gather_start") requests.push_back({node, std::nullopt, issues});
  }
  ThreadGroup group;
  OnTwoRanks([&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.time_in_step_runs = false;  // micro-runs (a run of kStep would fail on %bad)
    options.collective_runs = collective_runs;
    options.max_collective_runs = 12;
    options.seconds_per_collective = seconds_per_collective;
    result.times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  });
  result.collectives = group.collectives();
  return result;
}

// On CPU a fast collective runs more than collective_runs times, as many as its budget
// allows at the slowest rank's pace (up to max_collective_runs): the same count on both
// ranks, or the second would wait for a gather the first never starts. A key the step
// issues at two places is timed at each in turn, and its time is their mean.
TEST(CollectiveTimingTest, FastCollectivesOnCpuRunMoreTimesInLockstep) {
  // Alone, then overlapping 20 ms of compute (this communicator reports no timing: the
  // run lasts to the wait's end); far more time than 12 runs take.
  GatherRuns runs = MicroRunTheGather({{0.0, 0.0}, {0.0, 0.02}}, /*collective_runs=*/4, /*seconds_per_collective=*/60);
  ASSERT_TRUE(runs.times[0].ok()) << runs.times[0].status();
  ASSERT_TRUE(runs.times[1].ok()) << runs.times[1].status();
  ASSERT_EQ(runs.times[0]->size(), 1u);
  EXPECT_EQ((*runs.times[0])[0].runs, 2 * 12);
  EXPECT_EQ((*runs.times[0])[0].seconds, (*runs.times[1])[0].seconds);
  ASSERT_TRUE((*runs.times[0])[0].seconds.has_value());
  // Half the weight is the overlapped issue's (about 20 ms of compute, as the probe
  // guessed it; 12 ms in one run): alone, a thread handshake takes ~0.1 ms.
  EXPECT_GT(*(*runs.times[0])[0].seconds, 0.002);
  // The request check, agreement, the ranks' time per unit of compute, one warm-up, 4
  // runs, the pace, 8 runs more.
  EXPECT_EQ(runs.collectives, 1 + 2 + 1 + 1 + 4 + 1 + 8);
}

// With no time for more runs, a collective on CPU still runs once per issue group, even
// where that is more than collective_runs: the extension's lower clamp, on both ranks.
TEST(CollectiveTimingTest, CollectivesWithoutTimeForMoreRunOncePerIssueGroup) {
  // Two issue groups, one run asked for: the extension (at run 1) must keep the second.
  GatherRuns runs = MicroRunTheGather({{0.0, 0.0}, {0.0, 0.001}}, /*collective_runs=*/1, /*seconds_per_collective=*/0);
  ASSERT_TRUE(runs.times[0].ok()) << runs.times[0].status();
  ASSERT_TRUE(runs.times[1].ok()) << runs.times[1].status();
  ASSERT_EQ(runs.times[0]->size(), 1u);
  EXPECT_EQ((*runs.times[0])[0].runs, 2 * 2);
  EXPECT_EQ((*runs.times[0])[0].seconds, (*runs.times[1])[0].seconds);
  // The request check, agreement, the ranks' time per unit of compute, one warm-up, run
  // 1, the pace (which allows none more), run 2, the times.
  EXPECT_EQ(runs.collectives, 1 + 2 + 1 + 1 + 1 + 1 + 1);
}


}  // namespace
}  // namespace magi::calibration
