// CUDA cases: they run where a GPU is (tools/gpu_check.sh) and skip elsewhere.
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

// On CUDA a partition's memory is the caching allocator's peak over one run (whatever
// code allocates it), measured the same: %e and %r, 2 KiB each (multiples of the
// allocator's 512-byte rounding). Runs where a GPU is (the GPU machine's --config=cuda).
TEST(CudaTimingTest, PartitionCallsOnCudaMeasureTheAllocatorsPeak) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Module>> module = PartitionCallStep("@cuda:0");
  ASSERT_TRUE(module.ok()) << module.status();
  const Node& call = *(*module)->FindGraph("step")->FindValue("c")->producer();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> partition = CompileForTorch("interpreter", **module, "step.p.0");
  ASSERT_TRUE(partition.ok()) << partition.status();
  std::vector<KernelRequest> requests(1);
  requests[0].node = &call;
  requests[0].callee = std::shared_ptr<Executable>(std::move(*partition));
  TorchKernelCalibratorOptions options;
  options.device = at::Device(at::kCUDA, 0);
  options.seconds_per_kernel = 0.0;
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_TRUE((*times)[0].seconds.has_value());
  EXPECT_EQ((*times)[0].working_bytes, 2 * 2048);
}

// A group of one rank: an all-gather returns its inputs.
class OneRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string&) override {
    if (kind != CollectiveKind::kAllGather) return absl::UnimplementedError("all-gather only");
    return std::unique_ptr<CollectiveHandle>(std::make_unique<DoneHandle>(std::move(inputs)));
  }
};

// On CUDA nccl_stream skips a collective over one rank, so the calibrator leaves it to the
// formula without announcing a measurement: a compile from a cached table says nothing.
TEST(CudaTimingTest, OneRankCollectivesOnCudaAreLeftToTheFormulaUnannounced) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests;
  for (const Node* node : (*module)->FindGraph("g")->nodes()) {
    if (node->op() == "magi::all_gather_start") requests.push_back({node, std::nullopt});
  }
  ASSERT_EQ(requests.size(), 1u);
  auto communicator = std::make_shared<OneRankCommunicator>();
  TorchKernelCalibratorOptions options;
  options.device = at::Device(at::kCUDA, 0);
  options.communicators["dp"] = communicator;
  options.progress = true;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_FALSE((*times)[0].seconds.has_value());
  EXPECT_EQ(said.find("calibrat"), std::string::npos) << said;
}

}  // namespace
}  // namespace magi::calibration
