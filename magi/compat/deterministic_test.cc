#include "magi/compat/deterministic.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

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

TEST(DeterministicCompatTest, SuspensionRestoresTheModeItFound) {
  SetDeterministicAlgorithms(true);
  {
    DeterministicAlgorithmsSuspended suspended;
    EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
    EXPECT_TRUE(at::globalContext().deterministicCuDNN());  // only ATen's algorithm check is suspended
  }
  EXPECT_TRUE(DeterministicAlgorithmsEnabled());
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  { DeterministicAlgorithmsSuspended suspended; }
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_TRUE(at::globalContext().deterministicAlgorithmsWarnOnly());
  SetDeterministicAlgorithms(false);
  { DeterministicAlgorithmsSuspended suspended; }  // off stays off
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

// Deterministic mode leaves LibTorch's fill of every allocation off (2.1+: it cost 5.0 ms
// of the 953M step) and fills only what a step can read unwritten (FillUninitialized).
TEST(DeterministicCompatTest, FillsOnlyWhatExecutorsAskFor) {
  SetDeterministicAlgorithms(true);
  EXPECT_TRUE(DeterministicAlgorithmsOn());
  EXPECT_NE(DescribeDeterministicAlgorithms().find("empty ops' results filled by Magi"), std::string::npos)
      << DescribeDeterministicAlgorithms();
  at::Tensor f = at::empty({5}, at::kFloat);
  FillUninitialized(f);
  EXPECT_TRUE(at::isnan(f).all().item<bool>());
  at::Tensor h = at::empty({3}, at::kBFloat16);
  FillUninitialized(h);
  EXPECT_TRUE(at::isnan(h.to(at::kFloat)).all().item<bool>());
  at::Tensor i = at::empty({4}, at::kLong);
  FillUninitialized(i);
  EXPECT_TRUE((i == std::numeric_limits<int64_t>::max()).all().item<bool>());
  at::Tensor b = at::empty({2}, at::kBool);
  FillUninitialized(b);
  EXPECT_TRUE(b.all().item<bool>());
  at::Tensor u = at::empty({3}, at::kByte);
  FillUninitialized(u);
  EXPECT_TRUE((u == 255).all().item<bool>());
  at::Tensor strided = at::empty_strided({2, 3}, {1, 2}, at::kFloat);  // not contiguous
  FillUninitialized(strided);
  EXPECT_TRUE(at::isnan(strided).all().item<bool>());
  at::Tensor none;
  FillUninitialized(none);  // undefined and empty tensors are left alone
  SetDeterministicAlgorithms(false);
  EXPECT_FALSE(DeterministicAlgorithmsOn());
  // The check that keeps LibTorch's own fill (MAGI_FILL_UNINITIALIZED=all).
  // (1.13 has no such fill: Magi's is the only one there.)
  SetDeterministicAlgorithms(true, /*fill_every_allocation=*/true);
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_NE(DescribeDeterministicAlgorithms().find(", fill uninitialized memory"), std::string::npos)
      << DescribeDeterministicAlgorithms();
#endif
  SetDeterministicAlgorithms(false);
}

}  // namespace
}  // namespace magi::compat
