#include "magi/cost/simulator.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// Every op costs 10 us (overhead only); a 1 MB gather over 2 ranks costs
// 1 us + 10 us + 0.5 MB / 1 GB/s = 511 us.
constexpr absl::string_view kProfile = R"(name: test
matmul_flops.f32: 1e30
vector_flops: 1e30
memory_bandwidth: 1e30
op_overhead_s: 1e-5
link.intra.latency_s: 1e-5
link.intra.bandwidth: 1e9
link.inter.latency_s: 1e-5
link.inter.bandwidth: 1e9
ranks_per_node: 8
)";

std::string Step(bool overlapped) {
  std::string gather = R"(
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[250000]>)";
  std::string compute = R"(
    %a = aten::neg(%x) : f32[4]
    %b = aten::exp(%a) : f32[4])";
  return std::string(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[4]
    input %s: f32[125000])") +
         (overlapped ? gather + compute : compute + gather) + R"(
    %w = magi::wait(%f) : f32[250000]
    %y = aten::sum(%w, none) : f32[]
    output y = %y
    output b = %b
  }
}
)";
}

SimulationResult SimulateStep(bool overlapped) {
  auto module = ParseModule(Step(overlapped));
  EXPECT_TRUE(module.ok()) << module.status();
  auto profile = ParseDeviceProfile(kProfile);
  EXPECT_TRUE(profile.ok()) << profile.status();
  absl::StatusOr<SimulationResult> result = Simulate(*(*module)->FindGraph("g"), CostModel(*profile));
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

TEST(SimulatorTest, ExposedCommunicationIsWhatComputeDoesNotHide) {
  const double gather = 1e-5 + 1e-5 + 0.5e6 / 1e9;
  SimulationResult serial = SimulateStep(false);
  EXPECT_NEAR(serial.compute_seconds, 3e-5, 1e-12);
  EXPECT_NEAR(serial.communication_seconds, gather, 1e-12);
  EXPECT_NEAR(serial.exposed_communication_seconds, gather, 1e-12);
  EXPECT_NEAR(serial.step_seconds, 3e-5 + gather, 1e-12);
  SimulationResult overlapped = SimulateStep(true);
  // neg and exp (20 us) run while the gather is in flight.
  EXPECT_NEAR(overlapped.exposed_communication_seconds, gather - 2e-5, 1e-12);
  EXPECT_NEAR(overlapped.step_seconds, gather + 1e-5, 1e-12);
  EXPECT_GT(overlapped.overlap_fraction(), 0.0);
  EXPECT_EQ(overlapped.num_collectives, 1);
  // The gathered megabyte is counted from the start: x, s, the gather, then sum's result.
  EXPECT_EQ(overlapped.peak_bytes, 16 + 500000 + 1000000 + 16);
}

TEST(SimulatorTest, ChromeTraceHasATrackPerStream) {
  SimulationResult result = SimulateStep(true);
  std::string json = ChromeTraceJson(result, "rank 0");
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"compute\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"all-gather\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"aten::exp\""), std::string::npos);
  EXPECT_NE(json.find("all_gather_start [1 tensors, 1.00 MB]"), std::string::npos) << json;
  EXPECT_EQ(json.back(), '\n');
}

TEST(SimulatorTest, WaitBeforeStartIsAnError) {
  auto module = ParseModule(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %s: f32[4]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[8]>
    %w = magi::wait(%f) : f32[8]
    output w = %w
  }
}
)");
  ASSERT_TRUE(module.ok());
  Graph& g = *(*module)->FindGraph("g");
  g.MoveBefore(g.FindValue("w")->producer(), g.FindValue("f")->producer());
  auto profile = ParseDeviceProfile(kProfile);
  absl::StatusOr<SimulationResult> result = Simulate(g, CostModel(*profile));
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("waits before its collective starts"), std::string::npos);
}

}  // namespace
}  // namespace magi
