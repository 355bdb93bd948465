#include "magi/cost/cost_model.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/cost/calibration.h"
#include "magi/cost/device_profile.h"
#include "magi/cost/simulator.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

constexpr absl::string_view kProfile = R"(# a round-number device
name: test
matmul_flops.f32: 1e12
vector_flops: 1e11
memory_bandwidth: 1e10
op_overhead_s: 1e-6
link.intra.latency_s: 1e-5
link.intra.bandwidth: 1e9
link.inter.latency_s: 1e-4
link.inter.bandwidth: 1e8
ranks_per_node: 4
)";

std::unique_ptr<Module> Parse(absl::string_view text) {
  auto module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

TEST(DeviceProfileTest, BuiltinsLoadAndPrintBack) {
  for (const std::string& name : BuiltinDeviceProfiles()) {
    absl::StatusOr<DeviceProfile> profile = LoadDeviceProfile(name);
    ASSERT_TRUE(profile.ok()) << profile.status();
    EXPECT_EQ(profile->name, name);
    absl::StatusOr<DeviceProfile> again = ParseDeviceProfile(PrintDeviceProfile(*profile));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(PrintDeviceProfile(*again), PrintDeviceProfile(*profile));
  }
  EXPECT_EQ(BuiltinDeviceProfiles(), (std::vector<std::string>{"cpu", "h200"}));
  absl::StatusOr<DeviceProfile> h200 = LoadDeviceProfile("h200");
  ASSERT_TRUE(h200.ok());
  EXPECT_DOUBLE_EQ(h200->MatmulFlops(DType::kBFloat16), 8.0e14);
  EXPECT_DOUBLE_EQ(h200->memory_bandwidth, 4.3e12);
}

TEST(DeviceProfileTest, ErrorsNameTheLine) {
  auto bad_number = ParseDeviceProfile("name: x\nvector_flops: fast\n", "x.profile");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_NE(bad_number.status().message().find("x.profile:2"), std::string::npos) << bad_number.status();
  for (const char* number : {"nan", "inf", "-inf", "1e999"}) {
    auto not_finite = ParseDeviceProfile(absl::StrCat("name: x\nmemory_bandwidth: ", number, "\n"), "x.profile");
    EXPECT_EQ(not_finite.status().message(),
              absl::StrCat("x.profile:2: 'memory_bandwidth' needs a non-negative, finite number, not '", number, "'"));
  }
  auto unknown = ParseDeviceProfile("name: x\nwarp_speed: 9\n", "x.profile");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown key 'warp_speed'"), std::string::npos);
  auto missing = ParseDeviceProfile("name: x\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("vector_flops"), std::string::npos);
  auto not_found = LoadDeviceProfile("tpu");
  ASSERT_FALSE(not_found.ok());
  EXPECT_NE(not_found.status().message().find("cpu, h200"), std::string::npos);
  EXPECT_EQ(LoadDeviceProfile("/nonexistent/x.profile").status().code(), absl::StatusCode::kNotFound);
}

TEST(CostModelTest, RooflineOfMatmulsElementwiseAndViews) {
  auto profile = ParseDeviceProfile(kProfile);
  ASSERT_TRUE(profile.ok()) << profile.status();
  CostModel model(*profile);
  auto module = Parse(R"(module @m {
  graph @g {
    input %a: f32[256,512]
    input %b: f32[512,128]
    input %bias: f32[128]
    %mm = aten::mm(%a, %b) : f32[256,128]
    %addmm = aten::addmm(%bias, %a, %b, beta = 1, alpha = 1) : f32[256,128]
    %relu = aten::relu(%mm) : f32[256,128]
    %t = aten::t(%relu) : f32[128,256]strides[1,128]
    output y = %t
    output z = %addmm
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& g = *module->FindGraph("g");
  NodeCost mm = model.Cost(*g.FindValue("mm")->producer());
  EXPECT_DOUBLE_EQ(mm.flops, 2.0 * 256 * 512 * 128);
  EXPECT_DOUBLE_EQ(mm.bytes, 4.0 * (256 * 512 + 512 * 128 + 256 * 128));
  // Compute-bound: 33.5 MFLOP at 1 TFLOP/s = 33.6 us > 0.786 MB at 10 GB/s = 78.6 us? No: memory-bound.
  EXPECT_DOUBLE_EQ(mm.seconds, 1e-6 + mm.bytes / 1e10);
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("addmm")->producer()).flops, 2.0 * 256 * 512 * 128);
  NodeCost relu = model.Cost(*g.FindValue("relu")->producer());
  EXPECT_DOUBLE_EQ(relu.bytes, 2 * 4.0 * 256 * 128);
  EXPECT_DOUBLE_EQ(relu.seconds, 1e-6 + relu.bytes / 1e10);
  NodeCost view = model.Cost(*g.FindValue("t")->producer());
  EXPECT_EQ(view.bytes, 0);
  EXPECT_LT(view.seconds, 1e-6);
}

// Every convolution is counted as one (conv3d used to fall through to the matmul rule,
// which contracted the input's last spatial dimension).
TEST(CostModelTest, ConvolutionsCountWeightElementsPerOutput) {
  auto profile = ParseDeviceProfile(kProfile);
  ASSERT_TRUE(profile.ok()) << profile.status();
  CostModel model(*profile);
  auto module = Parse(R"(module @m {
  graph @g {
    input %x: f32[2,3,8,8,8]
    input %w: f32[4,3,3,3,3]
    %y = aten::conv3d(%x, %w, none, [1, 1, 1], [1, 1, 1], [1, 1, 1], 1) : f32[2,4,8,8,8]
    %z = aten::convolution(%x, %w, none, [1, 1, 1], [1, 1, 1], [1, 1, 1], false, [0, 0, 0], 1) : f32[2,4,8,8,8]
    output y = %y
    output z = %z
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& g = *module->FindGraph("g");
  const double expected = 2.0 * (2 * 4 * 8 * 8 * 8) * (3 * 3 * 3 * 3);
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("y")->producer()).flops, expected);
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("z")->producer()).flops, expected);
}

TEST(CostModelTest, CollectivesUseAlphaBetaOnTheLinkTheGroupSpans) {
  auto profile = ParseDeviceProfile(kProfile);
  ASSERT_TRUE(profile.ok());
  CostModel model(*profile);
  const double mb = 1e6;
  // 4 ranks fit a node: 3 steps of 10 us + 3/4 MB at 1 GB/s.
  EXPECT_DOUBLE_EQ(model.CollectiveSeconds(CollectiveKind::kAllGather, mb, 4), 1e-6 + 3 * 1e-5 + 0.75 * mb / 1e9);
  EXPECT_DOUBLE_EQ(model.CollectiveSeconds(CollectiveKind::kAllReduce, mb, 4), 1e-6 + 6 * 1e-5 + 1.5 * mb / 1e9);
  // 8 ranks span nodes: the slower link.
  EXPECT_DOUBLE_EQ(model.CollectiveSeconds(CollectiveKind::kReduceScatter, mb, 8), 1e-6 + 7 * 1e-4 + 0.875 * mb / 1e8);
  auto module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 4}
  graph @g {
    input %s: f32[64,1024]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[256,1024]>
    %w = magi::wait(%f) : f32[256,1024]
    %r = magi::reduce_scatter_start([%w], group = "dp", reduce_op = "sum") : future<f32[64,1024]>
    %x = magi::wait(%r) : f32[64,1024]
    output x = %x
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& g = *module->FindGraph("g");
  const double full = 4.0 * 256 * 1024;
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("f")->producer()).seconds,
                   model.CollectiveSeconds(CollectiveKind::kAllGather, full, 4));
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("r")->producer()).seconds,
                   model.CollectiveSeconds(CollectiveKind::kReduceScatter, full, 4));
  EXPECT_EQ(model.Cost(*g.FindValue("w")->producer()).seconds, 0);
}

TEST(CalibrationTest, MeasuredTimesReplaceTheFormulaAndRoundTrip) {
  auto profile = ParseDeviceProfile(kProfile);
  ASSERT_TRUE(profile.ok());
  auto module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[8,8]
    %e = aten::exp(%a) : f32[8,8]
    %f = magi::all_gather_start([%e], group = "dp") : future<f32[16,8]>
    %w = magi::wait(%f) : f32[16,8]
    %n = aten::neg(%w) : f32[16,8]
    output n = %n
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& g = *module->FindGraph("g");
  CalibrationTable table;
  ASSERT_TRUE(table.AddRun(g, {3e-6, 1e-6, 4e-5, 2e-6}).ok());
  ASSERT_TRUE(table.AddRun(g, {5e-6, 1e-6, 6e-5, 2e-6}).ok());
  EXPECT_FALSE(table.AddRun(g, {1.0}).ok());
  EXPECT_EQ(table.size(), 3u);
  CostModel model(*profile, &table);
  NodeCost exp = model.Cost(*g.FindValue("e")->producer());
  EXPECT_TRUE(exp.calibrated);
  EXPECT_DOUBLE_EQ(exp.seconds, 4e-6);
  EXPECT_DOUBLE_EQ(model.Cost(*g.FindValue("f")->producer()).seconds, 5.1e-5);  // start + wait
  EXPECT_EQ(CalibrationTable::KeyOf(*g.FindValue("f")->producer()),
            "magi::all_gather_start[world=2](f32[8,8]) -> future<f32[16,8]>");

  std::string path = std::string(getenv("TEST_TMPDIR")) + "/calibration.csv";
  ASSERT_TRUE(table.Save(path).ok());
  absl::StatusOr<CalibrationTable> loaded = CalibrationTable::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->ToCsv(), table.ToCsv());
  // Read back bit for bit (17 digits), whatever the mean: a cached table plans like the measured one.
  table.Set("aten::exp(f32[8,8]) -> f32[8,8]", 1.0 / 3.0);
  ASSERT_TRUE(table.Save(path, "a comment\nof two lines").ok());
  loaded = CalibrationTable::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->Find("aten::exp(f32[8,8]) -> f32[8,8]"), 1.0 / 3.0);
  EXPECT_EQ(loaded->size(), table.size());
  auto bad = CalibrationTable::FromCsv("1e-6,1,aten::exp(f32[8,8]) -> f32[8,8]\nfast,1,x\n", "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.csv:2"), std::string::npos) << bad.status();
  for (const char* seconds : {"nan", "inf"}) {
    auto not_finite = CalibrationTable::FromCsv(absl::StrCat(seconds, ",1,aten::exp(f32[8,8]) -> f32[8,8]\n"), "t.csv");
    EXPECT_EQ(not_finite.status().code(), absl::StatusCode::kInvalidArgument) << seconds;
  }
}

// The accumulator adds what AddRun of each run adds (a repeated kernel's occurrences, a
// start with its wait), with the keys built once.
TEST(CalibrationTest, AccumulatedRunsAddWhatEachRunWouldAdd) {
  auto module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[8,8]
    %e = aten::exp(%a) : f32[8,8]
    %f = magi::all_gather_start([%e], group = "dp") : future<f32[16,8]>
    %x = aten::exp(%a) : f32[8,8]
    %w = magi::wait(%f) : f32[16,8]
    %n = aten::neg(%w) : f32[16,8]
    output n = %n
    output x = %x
  }
  graph @h {
    input %a: f32[8,8]
    output a = %a
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& g = *module->FindGraph("g");
  const std::vector<std::vector<double>> runs = {{3e-6, 1e-6, 5e-6, 4e-5, 2e-6}, {5e-6, 1e-6, 9e-6, 6e-5, 4e-6}};
  CalibrationTable each;
  RunTimeAccumulator accumulated(g);
  EXPECT_TRUE(accumulated.Accumulates(g));
  EXPECT_FALSE(accumulated.Accumulates(*module->FindGraph("h")));
  for (const std::vector<double>& run : runs) {
    ASSERT_TRUE(each.AddRun(g, run).ok());
    ASSERT_TRUE(accumulated.Add(run).ok());
  }
  absl::Status wrong = accumulated.Add({1.0});
  EXPECT_EQ(wrong.message(), "calibration: 1 times for a graph of 5 nodes");
  EXPECT_EQ(accumulated.runs(), 2);
  CalibrationTable table;
  accumulated.AddTo(table);
  ASSERT_EQ(table.size(), 3u);
  for (const auto& [key, entry] : each.entries()) {
    ASSERT_TRUE(table.entries().count(key)) << key;
    EXPECT_EQ(table.entries().at(key).count, entry.count) << key;
    EXPECT_NEAR(table.entries().at(key).mean_seconds, entry.mean_seconds, 1e-18) << key;
  }
  EXPECT_EQ(table.entries().at("aten::exp(f32[8,8]) -> f32[8,8]").count, 4);
  EXPECT_NEAR(*table.Find("aten::exp(f32[8,8]) -> f32[8,8]"), 5.5e-6, 1e-18);
  // (The gather overlaps an exp: its key says so.)
  EXPECT_NEAR(*table.Find("magi::all_gather_start[world=2, overlapped](f32[8,8]) -> future<f32[16,8]>"), 5.1e-5,
              1e-18);
}

// A collective with compute between its start and its wait is keyed apart from one that
// runs alone (views and other collectives between them do not count); a table that has
// only the other context's time serves it.
TEST(CalibrationTest, ACollectiveOverlappingComputeIsKeyedApart) {
  auto module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[8,8]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[16,8]>
    %v = aten::view(%a, size = [64]) : f32[64]
    %g = magi::all_gather_start([%a], group = "dp") : future<f32[16,8]>
    %e = aten::exp(%a) : f32[8,8]
    %w = magi::wait(%f) : f32[16,8]
    %x = magi::wait(%g) : f32[16,8]
    %h = magi::all_gather_start([%e], group = "dp") : future<f32[16,8]>
    %y = magi::wait(%h) : f32[16,8]
    output w = %w
    output x = %x
    output y = %y
    output v = %v
  }
}
)");
  ASSERT_NE(module, nullptr);
  std::vector<Node*> nodes = module->FindGraph("g")->nodes();
  const Node& f = *nodes[0];
  const Node& g = *nodes[2];
  const Node& h = *nodes[6];
  EXPECT_TRUE(CalibrationTable::Overlapped(f)) << "a view and a start, then the exp";
  EXPECT_TRUE(CalibrationTable::Overlapped(g));
  EXPECT_FALSE(CalibrationTable::Overlapped(h)) << "its wait follows it";
  EXPECT_FALSE(CalibrationTable::Overlapped(*nodes[3])) << "not a collective";
  const std::string alone = "magi::all_gather_start[world=2](f32[8,8]) -> future<f32[16,8]>";
  const std::string overlapped = "magi::all_gather_start[world=2, overlapped](f32[8,8]) -> future<f32[16,8]>";
  EXPECT_EQ(CalibrationTable::KeyOf(f), overlapped);
  EXPECT_EQ(CalibrationTable::KeyOf(h), alone);

  CalibrationTable only_alone;
  only_alone.Set(alone, 2e-3);
  EXPECT_EQ(only_alone.Lookup(f), 2e-3);
  EXPECT_EQ(only_alone.Lookup(h), 2e-3);
  CalibrationTable both = only_alone;
  both.Set(overlapped, 3e-3);
  EXPECT_EQ(both.Lookup(f), 3e-3);
  EXPECT_EQ(both.Lookup(h), 2e-3);
  CalibrationTable only_overlapped;
  only_overlapped.Set(overlapped, 3e-3);
  EXPECT_EQ(only_overlapped.Lookup(h), 3e-3);
  EXPECT_EQ(CalibrationTable().Lookup(h), std::nullopt);
}

// A partition call is timed by its compiled partition when the table has it (one key for
// identical partitions, whatever their names), else by its callee's nodes one by one.
TEST(CalibrationTest, PartitionCallsShareAKeyByStructureAndSumTheirNodesUnmeasured) {
  auto profile = ParseDeviceProfile(kProfile);
  ASSERT_TRUE(profile.ok());
  auto module = Parse(R"(module @m {
  graph @step.ew.0 {
    input %x: f32[64,64]
    %e = aten::exp(%x) : f32[64,64]
    %n = aten::neg(%e) : f32[64,64]
    output n = %n
  }
  graph @step.ew.1 {
    input %y: f32[64,64]
    %u = aten::exp(%y) : f32[64,64]
    %v = aten::neg(%u) : f32[64,64]
    output v = %v
  }
  graph @step.ew.2 {
    input %y: f32[64,64]
    %u = aten::neg(%y) : f32[64,64]
    %v = aten::exp(%u) : f32[64,64]
    output v = %v
  }
  graph @step {
    input %a: f32[64,64]
    %b = magi::call([%a], callee = "step.ew.0") : f32[64,64]
    %m = aten::mm(%b, %b) : f32[64,64]
    %c = magi::call([%m], callee = "step.ew.1") : f32[64,64]
    %d = magi::call([%c], callee = "step.ew.2") : f32[64,64]
    output d = %d
  }
}
)");
  ASSERT_NE(module, nullptr);
  const Graph& step = *module->FindGraph("step");
  const Node& b = *step.FindValue("b")->producer();
  const Node& c = *step.FindValue("c")->producer();
  const Node& d = *step.FindValue("d")->producer();
  EXPECT_EQ(CalibrationTable::KeyOf(b), CalibrationTable::KeyOf(c));
  EXPECT_NE(CalibrationTable::KeyOf(b), CalibrationTable::KeyOf(d));
  EXPECT_EQ(CalibrationTable::KeyOf(b).rfind("magi::call[partition ", 0), 0u) << CalibrationTable::KeyOf(b);
  EXPECT_NE(CalibrationTable::KeyOf(b).find("(f32[64,64]) -> f32[64,64]"), std::string::npos);

  CalibrationTable table;
  CostModel model(*profile, &table);
  const Graph& callee = *module->FindGraph("step.ew.0");
  double nodes = 0;
  for (const Node* node : callee.nodes()) nodes += model.Cost(*node).seconds;
  NodeCost unmeasured = model.Cost(b);
  EXPECT_FALSE(unmeasured.calibrated);
  EXPECT_DOUBLE_EQ(unmeasured.seconds, nodes);
  EXPECT_GT(unmeasured.bytes, 0);

  // Unmeasured memory: the callee planned with its inputs held by the caller (e and n,
  // 16 KiB each, at the neg).
  EXPECT_EQ(model.WorkingBytes(b), 2 * 16384);
  EXPECT_EQ(model.WorkingBytes(*step.FindValue("m")->producer()), 0);  // not a call: its results only
  absl::StatusOr<SimulationResult> simulated = Simulate(step, model);
  ASSERT_TRUE(simulated.ok()) << simulated.status();
  EXPECT_EQ(simulated->peak_bytes, 16384 + 2 * 16384);  // %a, and the first call's e and n
  EXPECT_EQ(simulated->peak_node, 0);

  table.Set(CalibrationTable::KeyOf(b), 7e-6, 1, /*working_bytes=*/5000);
  EXPECT_TRUE(model.Cost(b).calibrated);
  EXPECT_DOUBLE_EQ(model.Cost(b).seconds, 7e-6);
  EXPECT_DOUBLE_EQ(model.Cost(c).seconds, 7e-6);  // the identical partition
  EXPECT_FALSE(model.Cost(d).calibrated);
  EXPECT_EQ(model.WorkingBytes(b), 5000);  // measured
  EXPECT_EQ(model.WorkingBytes(c), 5000);
  EXPECT_EQ(model.WorkingBytes(d), 2 * 16384);
  simulated = Simulate(step, model);
  ASSERT_TRUE(simulated.ok()) << simulated.status();
  EXPECT_EQ(simulated->peak_bytes, 16384 + 2 * 16384);  // now at the last call (%c and its u, v)
  EXPECT_EQ(simulated->peak_node, 3);
}

// A call's working bytes round-trip through the CSV (a reader of the three-field form sees
// an unknown key); malformed bytes are an error naming the line.
TEST(CalibrationTest, WorkingBytesRoundTrip) {
  CalibrationTable table;
  table.Set("magi::call[partition 1f](f32[8]) -> f32[8]", 2.5e-6, 3, 4096);
  table.Set("aten::exp(f32[8]) -> f32[8]", 1e-6, 2);
  const std::string csv = table.ToCsv();
  EXPECT_NE(csv.find("2.5000000000000002e-06,3,working_bytes=4096,magi::call[partition 1f](f32[8]) -> f32[8]\n"),
            std::string::npos)
      << csv;
  absl::StatusOr<CalibrationTable> loaded = CalibrationTable::FromCsv(csv);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->ToCsv(), csv);
  EXPECT_EQ(loaded->FindWorkingBytes("magi::call[partition 1f](f32[8]) -> f32[8]"), 4096);
  EXPECT_EQ(loaded->Find("magi::call[partition 1f](f32[8]) -> f32[8]"), 2.5e-6);
  EXPECT_EQ(loaded->FindWorkingBytes("aten::exp(f32[8]) -> f32[8]"), std::nullopt);
  for (const char* bad : {"1e-6,1,working_bytes=-4,k\n", "1e-6,1,working_bytes=x,k\n", "1e-6,1,working_bytes=4\n"}) {
    absl::StatusOr<CalibrationTable> parsed = CalibrationTable::FromCsv(bad, "t.csv");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("t.csv:1: expected"), std::string::npos) << parsed.status();
  }
}

}  // namespace
}  // namespace magi
