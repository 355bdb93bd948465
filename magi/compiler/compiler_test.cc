#include "magi/compiler/compiler.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::LoadTestdata;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A device profile read from a file (not a builtin name) and a calibration table that
// times every node of `graph` at 1.5x the analytical model: the two inputs the old text
// re-run lost (NOT_FOUND for the profile, the table dropped).
struct FileCostModel {
  std::string profile_path;
  std::string calibration_path;
};

FileCostModel WriteCostModelFiles(const Graph& graph) {
  DeviceProfile profile = *LoadDeviceProfile("h200");
  profile.name = "my-h200";
  FileCostModel files{TempPath("my.profile"), TempPath("calibration.csv")};
  EXPECT_TRUE(WriteFileAtomically(files.profile_path, PrintDeviceProfile(profile)).ok());
  CostModel analytical(profile);
  CalibrationTable table;
  for (const Node* node : graph.nodes()) {
    NodeCost cost = analytical.Cost(*node);
    if (cost.seconds > 0) table.Add(CalibrationTable::KeyOf(*node), 1.5 * cost.seconds);
  }
  EXPECT_TRUE(table.Save(files.calibration_path).ok());
  return files;
}

TEST(CompilerTest, TheSearchedPlanIsTheCompiledGraphWithFileProfileAndCalibration) {
  std::unique_ptr<Module> module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  FileCostModel files = WriteCostModelFiles(*module->FindGraph("train_step"));
  CompileOptions options;
  options.cost_model.device_profile = files.profile_path;
  options.cost_model.calibration_csv = files.calibration_path;
  options.optimization.canonicalize = "";  // the search below runs on the module as given
  options.optimization.memory_budget_bytes = 1750000;  // below every plan without recompute
  options.optimization.search.bucket_mb = {0, 1};
  options.optimization.search.prefetch = {-1, 0, 2};

  absl::StatusOr<CostModelBundle> cost = MakeCostModel(options.cost_model);
  ASSERT_TRUE(cost.ok()) << cost.status();
  ASSERT_NE(cost->calibration, nullptr);
  std::unique_ptr<Module> searched_copy = CloneModule(*module);
  SearchOptions search = options.optimization.search;
  search.memory_budget_bytes = options.optimization.memory_budget_bytes;
  absl::StatusOr<StrategyPlan> plan = SearchStrategy(*searched_copy, "train_step", *cost->model, search);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->pipeline.find("auto-recompute"), std::string::npos) << plan->pipeline;

  absl::StatusOr<OptimizedStep> step = OptimizeStep(std::move(module), "train_step", options, *cost->model);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->applied_pipeline, plan->pipeline);
  // The graph the driver goes on with is the one the search predicted, byte for byte...
  EXPECT_EQ(PrintModule(*step->module), PrintModule(*plan->optimized));
  // ...and it simulates to exactly the reported time and peak.
  absl::StatusOr<SimulationResult> applied = Simulate(step->graph(), *cost->model);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->step_seconds, plan->chosen.prediction.step_seconds);
  EXPECT_EQ(applied->peak_bytes, plan->chosen.prediction.peak_bytes);
  EXPECT_EQ(step->prediction.step_seconds, plan->chosen.prediction.step_seconds);
  EXPECT_EQ(step->prediction.peak_bytes, plan->chosen.prediction.peak_bytes);
  EXPECT_LE(step->prediction.peak_bytes, 1750000);
  // The table was used: the uncalibrated model predicts a different step.
  CostModel uncalibrated(cost->model->profile());
  absl::StatusOr<SimulationResult> without = Simulate(step->graph(), uncalibrated);
  ASSERT_TRUE(without.ok());
  EXPECT_NE(without->step_seconds, applied->step_seconds);
}

TEST(CompilerTest, PassPipelinesBindAutoRecomputeToTheDriversCostModel) {
  std::unique_ptr<Module> module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  FileCostModel files = WriteCostModelFiles(*module->FindGraph("train_step"));
  CompileOptions options;
  options.cost_model.device_profile = files.profile_path;
  options.cost_model.calibration_csv = files.calibration_path;
  options.optimization.passes = "reshard-after-forward{mode=reshard},auto-recompute{budget_mb=1.8}";
  absl::StatusOr<CostModelBundle> cost = MakeCostModel(options.cost_model);
  ASSERT_TRUE(cost.ok()) << cost.status();
  absl::StatusOr<OptimizedStep> step = OptimizeStep(std::move(module), "train_step", options, *cost->model);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_LE(step->prediction.peak_bytes, 1800000);

  // A pipeline naming another profile than the driver's model is refused, not silently mixed.
  options.optimization.passes = "auto-recompute{budget_mb=1.8,profile=cpu}";
  absl::StatusOr<OptimizedStep> mixed =
      OptimizeStep(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options, *cost->model);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("names profile 'cpu'"), std::string::npos) << mixed.status();
}

TEST(CompilerTest, BadRequestsAreClearErrors) {
  CompileOptions options;
  options.optimization.passes = "dce";
  options.optimization.memory_budget_bytes = 1;
  absl::StatusOr<CompiledStep> both = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<CompiledStep> no_graph = Compile(LoadTestdata("llama4_fsdp_step.mir"), "nope", CompileOptions());
  EXPECT_EQ(no_graph.status().code(), absl::StatusCode::kNotFound);

  CompileOptions unknown_backend;
  unknown_backend.backend = "no-such-backend";
  absl::StatusOr<CompiledStep> missing = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", unknown_backend);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("unknown backend 'no-such-backend'"), std::string::npos)
      << missing.status();

  CompileOptions bad_profile;
  bad_profile.cost_model.device_profile = "/nonexistent/x.profile";
  EXPECT_FALSE(Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", bad_profile).ok());
}

// Stand-ins for backends: a primary that takes anything, and partition backends that take
// adds and muls, one of which fails to compile any partition holding a mul; one that
// declines everything with one reason (as a backend that cannot work here does).
class StubExecutable : public Executable {
 public:
  explicit StubExecutable(std::string backend) : backend_(std::move(backend)) {}
  absl::string_view backend_name() const override { return backend_; }

 private:
  std::string backend_;
};

class StubBackend : public Backend {
 public:
  enum class Kind { kPrimary, kFlaky, kNothing };
  StubBackend(std::string name, Kind kind, ComponentOptions options)
      : name_(std::move(name)), kind_(kind), options_(std::move(options)) {}
  absl::string_view name() const override { return name_; }
  Capability GetCapability(const Module&, const Graph& graph) const override {
    Capability capability;
    for (const Node* node : graph.nodes()) {
      if (kind_ == Kind::kPrimary) continue;
      if (kind_ == Kind::kNothing) {
        capability.unsupported.emplace_back(node, "unavailable here: no such library");
      } else if (node->op() != "aten::add.Tensor" && node->op() != "aten::mul.Tensor") {
        capability.unsupported.emplace_back(node, node->op_namespace() == "magi" ? "a magi op" : "not add or mul");
      }
    }
    return capability;
  }
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph& graph,
                                                      const CompileContext&) const override {
    for (const Node* node : graph.nodes()) {
      if (kind_ == Kind::kFlaky && node->op() == "aten::mul.Tensor") {
        return absl::InternalError(absl::StrCat("the code generator crashed on ", node->DebugName(), " (",
                                                options_.count("tag") ? options_.at("tag") : "untagged", ")"));
      }
    }
    return std::unique_ptr<Executable>(new StubExecutable(name_));
  }

 private:
  std::string name_;
  Kind kind_;
  ComponentOptions options_;
};

MAGI_REGISTER(Backend, "test-primary", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-primary", StubBackend::Kind::kPrimary, options);
});
MAGI_REGISTER(Backend, "test-flaky", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-flaky", StubBackend::Kind::kFlaky, options);
});
MAGI_REGISTER(Backend, "test-nothing", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-nothing", StubBackend::Kind::kNothing, options);
});

// Two identical layers (add, mul) and an add-only tail, split by mms.
constexpr char kLayers[] = R"(module @m {
  graph @step {
    input %x: f32[4,4]
    input %w: f32[4,4] {role = param}
    %a0 = aten::add.Tensor(%x, %x, 1) : f32[4,4]
    %m0 = aten::mul.Tensor(%a0, %a0) : f32[4,4]
    %h0 = aten::mm(%m0, %w) : f32[4,4]
    %a1 = aten::add.Tensor(%h0, %h0, 1) : f32[4,4]
    %m1 = aten::mul.Tensor(%a1, %a1) : f32[4,4]
    %h1 = aten::mm(%m1, %w) : f32[4,4]
    %t = aten::add.Tensor(%h1, %h1, 1) : f32[4,4]
    output y = %t
  }
}
)";

TEST(CompilerTest, PartitionsThatFailToCompileFallBackToThePrimaryWithAWarning) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kLayers);
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options;
  options.optimization.canonicalize = "";
  options.backend = "test-primary";
  options.partitioning.backends = {"test-flaky"};
  options.partitioning.backend_options["test-flaky"] = {{"tag", "/a/path"}};
  options.partitioning.log = false;
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // The two layer partitions (identical, one compile) fell back; the tail stayed.
  ASSERT_EQ(compiled->fallen_back.size(), 2u);
  EXPECT_EQ(compiled->fallen_back[0].callee, "step.test-flaky.0");
  EXPECT_EQ(compiled->fallen_back[1].callee, "step.test-flaky.1");
  ASSERT_EQ(compiled->partitions.size(), 1u);
  EXPECT_EQ(compiled->partitions[0].callee, "step.test-flaky.2");
  EXPECT_EQ(compiled->partition_executables.size(), 1u);
  EXPECT_EQ(compiled->partition_executables.count("step.test-flaky.2"), 1u);
  EXPECT_EQ(compiled->executable->backend_name(), "test-primary");
  ASSERT_TRUE(VerifyModule(compiled->module()).ok());
  EXPECT_EQ(compiled->module().FindGraph("step.test-flaky.0"), nullptr);
  EXPECT_EQ(PrintGraph(compiled->graph()), R"(  graph @step {
    input %x: f32[4,4]
    input %w: f32[4,4] {role = param}
    %a0 = aten::add.Tensor(%x, %x, 1) : f32[4,4]
    %m0 = aten::mul.Tensor(%a0, %a0) : f32[4,4]
    %h0 = aten::mm(%m0, %w) : f32[4,4]
    %a1 = aten::add.Tensor(%h0, %h0, 1) : f32[4,4]
    %m1 = aten::mul.Tensor(%a1, %a1) : f32[4,4]
    %h1 = aten::mm(%m1, %w) : f32[4,4]
    %t.2 = magi::call([%h1], callee = "step.test-flaky.2") : f32[4,4]
    output y = %t.2
  }
)");
  ASSERT_EQ(compiled->notes.size(), 3u);
  EXPECT_EQ(compiled->notes[0],
            "partition backend 'test-flaky': 5 of the 7 nodes of @step in 3 partitions (2 distinct); declines 2: 2 x "
            "not add or mul");
  EXPECT_EQ(compiled->notes[1].rfind(
                "warning: partition @step.test-flaky.0 (2 nodes) failed to compile on backend 'test-flaky'; the "
                "primary backend 'test-primary' runs its nodes: the code generator crashed on aten::mul.Tensor "
                "defining %m0",
                0),
            0u)
      << compiled->notes[1];
  EXPECT_NE(compiled->notes[1].find("(/a/path)"), std::string::npos) << compiled->notes[1];  // backend_options arrived
  EXPECT_NE(compiled->notes[2].find("partition @step.test-flaky.1 (2 nodes) failed"), std::string::npos);
}

TEST(CompilerTest, ABackendThatDeclinesEverythingSaysWhy) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kLayers);
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options;
  options.optimization.canonicalize = "";
  options.backend = "test-primary";
  options.partitioning.backends = {"test-nothing"};
  options.partitioning.log = false;
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_TRUE(compiled->partitions.empty());
  ASSERT_EQ(compiled->notes.size(), 1u);
  EXPECT_EQ(compiled->notes[0],
            "partition backend 'test-nothing': 0 of the 7 nodes of @step in 0 partitions (0 distinct); it declines "
            "every node: unavailable here: no such library; the primary backend 'test-primary' runs them");
}

}  // namespace
}  // namespace magi
