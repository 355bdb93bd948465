// The calibrator as a whole, in one process: what it measures and keeps, its limits, its
// device key, partition calls, and the random generators it leaves as they were.
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

TEST(TorchKernelCalibratorTest, TheDeviceKeyNamesTheCpuThreadsAndLibTorch) {
  std::string key = TorchDeviceKey(at::Device(at::kCPU));
  EXPECT_EQ(key.rfind("cpu ", 0), 0u) << key;
  EXPECT_NE(key.find(" thread"), std::string::npos) << key;
  EXPECT_NE(key.find(", libtorch " TORCH_VERSION), std::string::npos) << key;
}

TEST(TorchKernelCalibratorTest, OneProcessMeasuresWhatIsNotKnownAndKeepsWhatIs) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  std::vector<KernelRequest> requests = Kernels(graph);
  requests[0].known = 0.25;  // the embedding: known, not measured again
  // No operand read into the cache before a timed run, a 1 MiB cache (the operands the step
  // wrote just before; the weights, graph inputs, are not), every produced operand.
  for (int64_t cache_bytes : {int64_t{0}, int64_t{1} << 20, int64_t{1} << 40}) {
    SCOPED_TRACE(cache_bytes);
    TorchKernelCalibratorOptions options;
    options.seconds_per_kernel = 0.0;  // min_runs each
    options.cpu_cache_bytes = cache_bytes;
    std::multiset<std::string> read_in;  // the first result of each node an operand was read in for
    options.on_cache_read_for_testing = [&](const Node& node, const at::Tensor&) {
      read_in.insert(node.result(0)->name());
    };
    std::shared_ptr<KernelCalibrator> calibrator = MakeTorchKernelCalibrator(options);
    absl::StatusOr<std::vector<KernelTime>> times = calibrator->Calibrate(requests);
    ASSERT_TRUE(times.ok()) << times.status();
    if (cache_bytes == 0) {
      EXPECT_TRUE(read_in.empty());
    } else {
      // Before each of the min_runs timed runs: e for the mm making h, h for the mm making
      // the logits, the logits for the log-softmax making ls. The embedding reads graph
      // inputs only (the weights and tokens: the previous step touched them last).
      const int runs = options.min_runs;
      EXPECT_EQ(read_in.count("logits"), runs);
      EXPECT_EQ(read_in.count("ls"), runs);
      EXPECT_EQ(read_in.count("h"), runs);
      EXPECT_EQ(read_in.count("e"), 0);
    }
    ASSERT_EQ(times->size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string& op = requests[i].node->op();
      SCOPED_TRACE(requests[i].node->DebugName());
      if (i == 0) {
        EXPECT_EQ((*times)[i].seconds, 0.25);
        EXPECT_FALSE((*times)[i].measured);
      } else if (op == "magi::all_gather_start" || requests[i].node->result(0)->name() == "bad") {
        // No communicator for "dp"; mm of [32,64] x [32,64] fails: both left to the formula.
        EXPECT_FALSE((*times)[i].seconds.has_value());
        EXPECT_TRUE((*times)[i].measured);
      } else {
        ASSERT_TRUE((*times)[i].seconds.has_value());
        EXPECT_GT(*(*times)[i].seconds, 0);
        EXPECT_LT(*(*times)[i].seconds, 1.0);
        EXPECT_EQ((*times)[i].runs, options.min_runs);
        EXPECT_TRUE((*times)[i].measured);
      }
    }
  }
}

// Past max_seconds the CPU's in-order rounds stop at min_runs, and kernels not yet
// prepared are left to the formula (not measured, no time).
TEST(TorchKernelCalibratorTest, KernelsPastTheTimeLimitAreLeftToTheFormula) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  TorchKernelCalibratorOptions options;
  options.max_seconds = -1;  // already past
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  for (const KernelTime& time : *times) EXPECT_FALSE(time.seconds.has_value());
}

// Measuring draws random inputs; the process's generator must come out as it went in, so a run
// that calibrates trains (and checkpoints) exactly as one that found its kernels cached.
TEST(TorchKernelCalibratorTest, MeasuringLeavesTheRandomGeneratorAsItWas) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  at::manual_seed(7);
  at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  int measured = 0;
  for (const KernelTime& time : *times) measured += time.seconds.has_value() && time.measured;
  ASSERT_GT(measured, 0);  // it did run kernels on random inputs
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

// A partition call (KernelRequest::callee) runs its compiled partition by itself: an
// interpreter-compiled TorchExecutable is timed; an executable that runs no LibTorch tensors
// (and a call without one) is left to the formula.
class OpaqueExecutable : public Executable {
 public:
  absl::string_view backend_name() const override { return "opaque"; }
};


TEST(TorchKernelCalibratorTest, PartitionCallsRunTheirCompiledPartition) {
  absl::StatusOr<std::unique_ptr<Module>> module = PartitionCallStep("");
  ASSERT_TRUE(module.ok()) << module.status();
  const Node& call = *(*module)->FindGraph("step")->FindValue("c")->producer();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> partition = CompileForTorch("interpreter", **module, "step.p.0");
  ASSERT_TRUE(partition.ok()) << partition.status();
  std::vector<KernelRequest> requests(4);
  for (KernelRequest& request : requests) request.node = &call;
  requests[0].callee = std::shared_ptr<Executable>(std::move(*partition));
  requests[1].callee = std::make_shared<OpaqueExecutable>();
  requests[3].callee = requests[0].callee;  // measured before (the cache): kept, memory included
  requests[3].known = 1e-3;
  requests[3].known_working_bytes = 77;
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_EQ(times->size(), 4u);
  ASSERT_TRUE((*times)[0].seconds.has_value());
  EXPECT_GT(*(*times)[0].seconds, 0);
  EXPECT_EQ((*times)[0].runs, options.min_runs);
  // While it runs the partition holds %e and %r (2 KiB each) beyond its inputs.
  EXPECT_EQ((*times)[0].working_bytes, 2 * 2048);
  EXPECT_FALSE((*times)[1].seconds.has_value());  // "backend 'opaque' does not run LibTorch tensors"
  EXPECT_FALSE((*times)[1].working_bytes.has_value());
  EXPECT_FALSE((*times)[2].seconds.has_value());  // a call node without its partition: not a kernel
  EXPECT_EQ((*times)[3].seconds, 1e-3);
  EXPECT_FALSE((*times)[3].measured);
  EXPECT_EQ((*times)[3].working_bytes, 77);
}


}  // namespace
}  // namespace magi::calibration
