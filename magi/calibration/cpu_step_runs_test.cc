// On CPU, kernels and collectives timed in runs of their step (cpu_step_runs.h), and the
// graphs that keep their micro-run times instead.
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

// A step with an rng.state input (a captured step that draws random numbers) runs for
// its kernels' times with the generator's own state as that input, and the generator comes
// out as it went in.
TEST(CpuStepRunsTest, AStepWithAnRngInputRunsAndLeavesTheGeneratorAsItWas) {
  const int64_t state_bytes = at::detail::getDefaultCPUGenerator().get_state().numel();
  const std::string text = absl::StrCat("module @m {\n  graph @g {\n    input %rng: u8[", state_bytes,
                                        "] {role = rng}\n", R"(    input %x: f32[64]
    %r = aten::bernoulli.p(%x, 0.5) : f32[64]
    %y = aten::mul.Tensor(%r, %x) : f32[64]
    output y = %y
  }
}
)");
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  ASSERT_EQ(requests.size(), 2u);
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  options.max_step_runs = 4;
  options.seconds_for_step_runs = 60;  // far more than 4 runs take
  at::manual_seed(7);
  at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  for (const KernelTime& time : *times) {
    ASSERT_TRUE(time.seconds.has_value());
    EXPECT_EQ(time.runs, 4);  // the step's runs, not min_runs micro-runs
  }
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

// On CPU the kernels and collectives of a graph that can run on synthesized inputs are
// timed in runs of that graph, as many on both ranks; the times agree as micro-run times do.
TEST(CpuStepRunsTest, CollectivesOnCpuAreTimedInRunsOfTheirStep) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(RunnableStep());
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  const std::vector<KernelRequest> requests = Kernels(graph);
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.step_warmup_runs = 1;
    options.max_step_runs = 5;
    options.seconds_for_step_runs = 60;  // far more than 5 runs take
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);  // bit for bit
    ASSERT_TRUE((*times[0])[i].seconds.has_value());
    EXPECT_GT(*(*times[0])[i].seconds, 0);
  }
  EXPECT_EQ((*times[0])[gather].runs, 2 * 5);  // one issue a run, 5 runs counted on each rank
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].node->result(0)->name() == "h") {
      EXPECT_EQ((*times[0])[i].runs, 2 * 5);  // not min_runs
    }
  }
  // The request check, agreement (missing kernels, then the times), whether all can run
  // the step, its one gather in the warm-up run, the ranks' pace, the gather in the 5
  // counted runs: no micro-run of it.
  EXPECT_EQ(group.collectives(), 1 + 2 + 1 + 1 + 1 + 5);
}

// A graph whose run would hold more than max_step_run_bytes at its peak on some rank is
// run by no rank: its kernels and collectives keep their micro-run times, on both ranks.
TEST(CpuStepRunsTest, AStepAboveTheStepRunMemoryLimitKeepsItsMicroRunTimes) {
  // The step CollectivesOnCpuAreTimedInRunsOfTheirStep runs (below the limit this one would).
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(RunnableStep());
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    // Rank 0's limit is below what the inputs alone hold (about 81 KB); rank 1 has the
    // default (half the host's available memory): neither runs the step.
    if (r == 0) options.max_step_run_bytes = 1024;
    options.collective_runs = 4;
    options.max_collective_runs = 4;
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  ASSERT_TRUE((*times[0])[gather].seconds.has_value());
  EXPECT_EQ((*times[0])[gather].runs, 2 * 4);  // micro-runs: one issue, 4 runs on each rank
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);
    if (requests[i].node->result(0)->name() == "h") {
      EXPECT_EQ((*times[0])[i].runs, 2 * 3);  // min_runs micro-runs, not step runs
    }
  }
}

// A kernel that cannot run on synthesized inputs keeps its step from running in later
// calls too (the compile driver asks about a step's kernels, then its collectives): the
// collectives are then micro-run, on both ranks, and nothing fails.
TEST(CpuStepRunsTest, AKernelThatCannotRunLeavesTheCollectivesOfLaterCallsToMicroRuns) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  std::vector<KernelRequest> compute, collectives;
  for (const KernelRequest& request : requests) {
    (request.node->op() == "magi::all_gather_start" ? collectives : compute).push_back(request);
  }
  ASSERT_EQ(collectives.size(), 1u);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> first[2], second[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.collective_runs = 4;
    options.max_collective_runs = 4;
    std::shared_ptr<KernelCalibrator> calibrator = MakeTorchKernelCalibrator(options);
    first[r] = calibrator->Calibrate(compute);  // %bad fails its micro-run here
    second[r] = calibrator->Calibrate(collectives);
  };
  OnTwoRanks(rank);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(first[r].ok()) << first[r].status();
    ASSERT_TRUE(second[r].ok()) << second[r].status();
  }
  ASSERT_TRUE((*second[0])[0].seconds.has_value());
  EXPECT_EQ((*second[0])[0].runs, 2 * 4);  // micro-runs
  // First call: the request check, the missing kernels, whether all can run the step (no:
  // %bad), the times. Second: the check, the missing kernels, one warm-up and 4 runs of
  // the gather, the times.
  EXPECT_EQ(group.collectives(), (1 + 1 + 1 + 1) + (1 + 1 + 1 + 4 + 1));
}


}  // namespace
}  // namespace magi::calibration
