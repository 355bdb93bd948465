// Checks that @libtorch is a working LibTorch: headers, libraries and kernels agree
// with what the repository rule detected (config.bzl) and a CPU op computes.
#include <torch/torch.h>

#include "gtest/gtest.h"

namespace {

TEST(LibTorchConfigureTest, VersionMacrosMatchTheDetectedVersion) {
  EXPECT_EQ(std::string(TORCH_VERSION), MAGI_EXPECTED_LIBTORCH_VERSION);
  EXPECT_GE(TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR, 113);
}

TEST(LibTorchConfigureTest, UsesTheCxx11Abi) { EXPECT_EQ(_GLIBCXX_USE_CXX11_ABI, 1); }

TEST(LibTorchConfigureTest, CpuKernelsAreRegistered) {
  torch::Tensor a = torch::arange(6, torch::kFloat32).reshape({2, 3});
  torch::Tensor b = torch::ones({3, 2});
  torch::Tensor c = torch::mm(a, b);
  EXPECT_EQ(c.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_FLOAT_EQ(c[0][0].item<float>(), 3.0f);
  EXPECT_FLOAT_EQ(c[1][1].item<float>(), 12.0f);
}

TEST(LibTorchConfigureTest, AutogradRuns) {
  torch::Tensor w = torch::full({2}, 3.0, torch::requires_grad());
  torch::Tensor loss = (w * w).sum();
  loss.backward();
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), 6.0f);
}

}  // namespace
