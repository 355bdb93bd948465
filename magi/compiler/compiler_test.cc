#include "magi/compiler/compiler.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/graph_utils.h"
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

}  // namespace
}  // namespace magi
