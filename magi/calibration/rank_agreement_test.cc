// Ranks agree: they measure in lockstep, return the same times, and measure nothing (without
// hanging) when they ask for different kernels.
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

TEST(RankAgreementTest, RanksMeasureInLockstepAndReturnTheSameTimes) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  const std::vector<KernelRequest> requests = Kernels(graph);
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    std::vector<KernelRequest> mine = requests;
    // The embedding is cached on both ranks (with different times: other machines); the
    // mm only on rank 0: both measure it.
    mine[0].known = r == 0 ? 0.25 : 0.75;
    if (r == 0) mine[2].known = 0.5;
    // The gather follows 10 ms of compute in the step: each run does that much first; and
    // the step overlaps it with 10 ms more: each run does that between its start and wait.
    mine[gather].issues = {{/*compute_before_seconds=*/0.01, /*compute_during_seconds=*/0.01}};
    options.max_collective_runs = options.collective_runs;  // no runs beyond the 18
    options.time_in_step_runs = false;  // micro-runs (%bad keeps this step from running anyway)
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);  // bit for bit
    EXPECT_EQ((*times[0])[i].measured, (*times[1])[i].measured);
  }
  EXPECT_EQ((*times[0])[0].seconds, 0.5);  // the mean of the ranks' cached times
  EXPECT_FALSE((*times[0])[0].measured);
  EXPECT_TRUE((*times[0])[2].measured);  // missing on rank 1
  EXPECT_NE((*times[0])[2].seconds, 0.5);
  ASSERT_TRUE((*times[0])[gather].seconds.has_value());
  // The compute it overlaps counts (this communicator reports no timing: to the wait's
  // end). That compute is 10 ms as the probe guessed its rate; under load the guess runs
  // short (3.4 ms once), while a thread handshake alone takes ~0.1 ms.
  EXPECT_GT(*(*times[0])[gather].seconds, 0.002);
  const int runs = TorchKernelCalibratorOptions().collective_runs;
  EXPECT_EQ(runs, 18);
  EXPECT_EQ((*times[0])[gather].runs, 2 * runs);  // the timed runs on each rank
  // The request check, agreement (missing kernels, then the times), the ranks' time per
  // unit of compute work, one warm-up and the timed runs of the gather (the compute beside
  // it adds none).
  EXPECT_EQ(group.collectives(), 1 + 2 + 1 + 1 + runs);
}

TEST(RankAgreementTest, RanksThatAskForDifferentKernelsMeasureNothingAndDoNotHang) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    // Rank 1 lacks the last kernel (as if it compiled another graph).
    std::vector<KernelRequest> mine(requests.begin(), requests.end() - (r == 1 ? 1 : 0));
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  EXPECT_EQ(times[0]->size(), requests.size());
  EXPECT_EQ(times[1]->size(), requests.size() - 1);
  for (const auto& ranks : times) {
    for (const KernelTime& time : *ranks) EXPECT_FALSE(time.seconds.has_value());
  }
  EXPECT_EQ(group.collectives(), 1);  // the check alone
}

// The same kernels issued differently (rank 1 sees compute before the gather, rank 0 none)
// would take different exchanges (the compute probe), so they count as different requests.
TEST(RankAgreementTest, RanksWhoseCollectivesAreIssuedDifferentlyMeasureNothingAndDoNotHang) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    std::vector<KernelRequest> mine = requests;
    mine[gather].issues = {{r == 1 ? 0.01 : 0.0, 0.0}};
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (const auto& ranks : times) {
    for (const KernelTime& time : *ranks) EXPECT_FALSE(time.seconds.has_value());
  }
  EXPECT_EQ(group.collectives(), 1);  // the check alone
}


}  // namespace
}  // namespace magi::calibration
