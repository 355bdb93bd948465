// Checks that @libtorch is a working LibTorch: headers, libraries and kernels agree
// with what the repository rule detected (config.bzl) and a CPU op computes. Prints the
// LibTorch the test ran against, so every CI leg's log says which one it tested.
#include <ATen/Version.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <climits>
#include <cstdlib>
#include <iostream>
#include <string>

#include "gtest/gtest.h"

namespace {

// The TORCH_VERSION=... entry of the build settings that the loaded libtorch_cpu reports.
std::string RuntimeVersion() {
  std::string config = at::show_config();
  std::string key = "TORCH_VERSION=";
  size_t start = config.find(key);
  if (start == std::string::npos) return "";
  start += key.size();
  return config.substr(start, config.find_first_of(", \n", start) - start);
}

// The file of the loaded library that defines at::show_config (libtorch_cpu).
std::string LoadedLibrary() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &info) == 0 || info.dli_fname == nullptr) return "";
  char resolved[PATH_MAX];
  return realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
}

TEST(LibTorchConfigureTest, VersionMacrosMatchTheDetectedVersion) {
  EXPECT_EQ(std::string(TORCH_VERSION), MAGI_EXPECTED_LIBTORCH_VERSION);
  EXPECT_GE(TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR, 113);
}

// The library that runs is the one whose headers we compiled against (not, say, Debian's
// LibTorch found by the loader instead of a pip install's).
TEST(LibTorchConfigureTest, RunsAgainstTheConfiguredLibrary) {
  std::string runtime = RuntimeVersion();
  std::string library = LoadedLibrary();
  std::cout << "ran against LibTorch " << runtime << " (headers " << TORCH_VERSION << ") loaded from " << library
            << std::endl;
  EXPECT_EQ(runtime, TORCH_VERSION);
  char home[PATH_MAX];
  ASSERT_NE(realpath(MAGI_EXPECTED_LIBTORCH_HOME, home), nullptr) << MAGI_EXPECTED_LIBTORCH_HOME;
  EXPECT_EQ(library.rfind(home, 0), 0u) << library << " is not under LIBTORCH_HOME " << home;
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
