#include "magi/compiler/compiler.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::CountOps;
using testing::LoadTestdata;

// A primary backend that runs nothing and records what the compiler told it.
class RecordingExecutable : public Executable {
 public:
  absl::string_view backend_name() const override { return "recording"; }
};
class RecordingBackend : public Backend {
 public:
  static int compiles;
  static bool last_deterministic;
  absl::string_view name() const override { return "recording"; }
  Capability GetCapability(const Module&, const Graph&) const override { return {}; }
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph&,
                                                      const CompileContext& context) const override {
    ++compiles;
    last_deterministic = context.deterministic;
    return std::unique_ptr<Executable>(new RecordingExecutable());
  }
};
int RecordingBackend::compiles = 0;
bool RecordingBackend::last_deterministic = false;
MAGI_REGISTER(Backend, "recording", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<RecordingBackend>();
});

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

TEST(PlanHashTest, Fnv1aMatchesTheReferenceVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

CompileOptions RecordingOptions() {
  CompileOptions options;
  options.backend = "recording";
  return options;
}

TEST(PlanHashTest, SameInputsSamePlanHashAndEveryPlanChangeShows) {
  absl::StatusOr<CompiledStep> a = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", RecordingOptions());
  absl::StatusOr<CompiledStep> b = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", RecordingOptions());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->plan_hash.size(), 16u);
  EXPECT_EQ(a->plan_hash, b->plan_hash);
  EXPECT_EQ(a->plan_hash, PlanHash(a->module(), RecordingOptions()));

  // Other buckets (collective sizes) are another plan.
  CompileOptions bucketed = RecordingOptions();
  bucketed.optimization.passes = "bucket-collectives{max_mb=1000}";
  absl::StatusOr<CompiledStep> c = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", bucketed);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->plan_hash, a->plan_hash);
  // So is the same module run in deterministic mode.
  CompileOptions deterministic = RecordingOptions();
  deterministic.deterministic = true;
  absl::StatusOr<CompiledStep> d = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", deterministic);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(d->plan_hash, a->plan_hash);
  EXPECT_EQ(PrintModule(d->module()), PrintModule(a->module()));
  // The cost model only matters through what it decided: a plain pipeline ignores it.
  CompileOptions other_profile = RecordingOptions();
  other_profile.cost_model.device_profile = "h200";
  absl::StatusOr<CompiledStep> e = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", other_profile);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->plan_hash, a->plan_hash);
}

TEST(PlanHashTest, AnExpectedPlanHashPinsThePlan) {
  absl::StatusOr<CompiledStep> first = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", RecordingOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  CompileOptions pinned = RecordingOptions();
  pinned.expected_plan_hash = first->plan_hash;
  EXPECT_TRUE(Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", pinned).ok());
  pinned.optimization.passes = "bucket-collectives{max_mb=1000}";
  absl::StatusOr<CompiledStep> other = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", pinned);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find(absl::StrCat(", not the expected ", first->plan_hash,
                                                       ": the model, world size, compile options or Magi version "
                                                       "differ")),
            std::string::npos)
      << other.status();
}

TEST(PlanHashTest, CollectivesAreSummarizedByKindWithTheirBytes) {
  std::unique_ptr<Module> module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  // 2 ranks; 4 blocks of 135,168 parameter bytes and the root's 128,256: each rank hands
  // in its half-size shards twice (forward and backward gathers) and the full-size
  // gradients once (reduce-scatters).
  EXPECT_EQ(DescribeCollectives(*module->FindGraph("train_step")),
            "10 all-gathers (0.669 MB), 5 reduce-scatters (0.669 MB)");
}

TEST(CompilerTest, DeterministicModeReachesTheBackend) {
  CompileOptions options = RecordingOptions();
  options.deterministic = true;
  ASSERT_TRUE(Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options).ok());
  EXPECT_TRUE(RecordingBackend::last_deterministic);
  options.deterministic = false;
  ASSERT_TRUE(Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options).ok());
  EXPECT_FALSE(RecordingBackend::last_deterministic);
}

TEST(CompilerTest, BatchInvariantSequencesUnrollTheOneSequenceGraph) {
  constexpr char kForward[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2, ranks = [0, 1]}
  graph @forward {
    input %w.shard: f32[2,4] {role = param}
    input %x: f32[1,3,4]
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]>
    %w = magi::wait(%f) : f32[4,4]
    %wt = aten::t(%w) : f32[4,4]strides[1,4]
    %h = aten::matmul(%x, %wt) : f32[1,3,4]
    output y = %h
  }
}
)";
  CompileOptions options = RecordingOptions();
  options.batch_invariant_sequences = 4;
  absl::StatusOr<CompiledStep> step = Compile(*ParseModule(kForward), "forward", options);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(CountOps(step->graph(), "aten::matmul"), 4);
  EXPECT_EQ(CountOps(step->graph(), kAllGatherStartOp), 1);
  EXPECT_EQ(step->graph().inputs()[1]->type().ToString(), "f32[4,3,4]");
  EXPECT_EQ(step->graph().outputs()[0].value->type().ToString(), "f32[4,3,4]");
}

}  // namespace
}  // namespace magi
