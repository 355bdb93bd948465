#include "magi/compat/kernel_trace.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace magi::compat {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(KernelTraceTest, RecordsTheAtenOpsBetweenStartAndStop) {
  const std::string path = std::string(::testing::TempDir()) + "/kernel_trace_test.json";
  absl::StatusOr<std::unique_ptr<KernelTrace>> trace = KernelTrace::Start(/*cuda=*/false);
#if TORCH_VERSION_MAJOR < 2
  // Debian's 1.13 is built without Kineto: a clear refusal, nothing written.
  if (!trace.ok()) {
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kUnavailable) << trace.status();
    EXPECT_NE(trace.status().message().find("Kineto cannot record here"), std::string::npos) << trace.status();
    return;
  }
#endif
  ASSERT_TRUE(trace.ok()) << trace.status();  // PyPI's 2.x wheels have Kineto
  at::Tensor a = at::ones({64, 64});
  at::Tensor b = at::mm(a, a).relu();
  absl::Status saved = (*trace)->StopAndSave(path);
  ASSERT_TRUE(saved.ok()) << saved;
  std::string json = ReadAll(path);
  EXPECT_NE(json.find("traceEvents"), std::string::npos);
  EXPECT_NE(json.find("aten::mm"), std::string::npos);
  EXPECT_NE(json.find("aten::relu"), std::string::npos);
  EXPECT_EQ(b.sum().item<float>(), 64.0f * 64 * 64);
  // Stopped once: a second stop is refused, and another trace may start.
  absl::Status again = (*trace)->StopAndSave(path);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<KernelTrace>> second = KernelTrace::Start(false);
  ASSERT_TRUE(second.ok()) << second.status();
  // A second trace while one records is refused.
  absl::StatusOr<std::unique_ptr<KernelTrace>> third = KernelTrace::Start(false);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  std::remove(path.c_str());
}

TEST(KernelTraceTest, AnUnwritablePathFailsNamingIt) {
  absl::StatusOr<std::unique_ptr<KernelTrace>> trace = KernelTrace::Start(false);
  if (!trace.ok()) GTEST_SKIP() << "no Kineto in this LibTorch: " << trace.status();
  absl::Status saved = (*trace)->StopAndSave("/nonexistent-folder/trace.json");
  EXPECT_FALSE(saved.ok());
  EXPECT_NE(saved.message().find("/nonexistent-folder/trace.json"), std::string::npos) << saved;
}

}  // namespace
}  // namespace magi::compat
