#include "magi/compat/deterministic.h"

#include <ATen/Context.h>

#include "gtest/gtest.h"

namespace magi::compat {
namespace {

TEST(DeterministicCompatTest, SwitchesAtensAlgorithmsCudnnAndBenchmarkTogether) {
  at::globalContext().setBenchmarkCuDNN(true);
  EXPECT_FALSE(DeterministicAlgorithmsEnabled());
  EXPECT_EQ(DescribeDeterministicAlgorithms(), "aten deterministic algorithms off");
  SetDeterministicAlgorithms(true);
  EXPECT_TRUE(DeterministicAlgorithmsEnabled());
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_FALSE(at::globalContext().deterministicAlgorithmsWarnOnly());
  EXPECT_TRUE(at::globalContext().deterministicCuDNN());
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());  // cuDNN's autotuner is off
  EXPECT_EQ(DescribeDeterministicAlgorithms().rfind("aten deterministic (errors), cudnn deterministic, no cudnn benchmark",
                                                    0),
            0u)
      << DescribeDeterministicAlgorithms();
  // Warn-only mode is not deterministic mode.
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  EXPECT_FALSE(DeterministicAlgorithmsEnabled());
  SetDeterministicAlgorithms(false);
  EXPECT_FALSE(DeterministicAlgorithmsEnabled());
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

TEST(DeterministicCompatTest, BackendsAskedForDeterminismSayWhatIsMissing) {
  SetDeterministicAlgorithms(false);
  absl::Status status = CheckDeterministicAlgorithms("interpreter");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "backend 'interpreter' was asked for a deterministic step, but this process runs with aten deterministic "
            "algorithms off: call magi::EnableDeterministicMode() (magi/runtime/deterministic) before anything runs");
  SetDeterministicAlgorithms(true);
  EXPECT_TRUE(CheckDeterministicAlgorithms("interpreter").ok());
  SetDeterministicAlgorithms(false);
}

}  // namespace
}  // namespace magi::compat
