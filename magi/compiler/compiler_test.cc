#include "magi/compiler/compiler.h"

#include <cstdlib>
#include <map>

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
  absl::StatusOr<StrategyPlan> plan = SearchStrategy(*searched_copy, "train_step", *cost->model,
                                                     options.optimization.memory_budget_bytes, options.optimization.search);
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

// Inference with weight preparation: q/k/v-like linears of one gathered bucket become one
// matmul, the concatenation of their shards moves to @forward.prep (compiled with the
// primary backend too), and the step reads it as an input; off by default.
TEST(CompilerTest, WeightPreparationConcatenatesLinearsAndHoistsTheConcatenation) {
  constexpr char kForward[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2, ranks = [0, 1]}
  graph @forward {
    input %x: f32[3,8]
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    input %wv.shard: f32[4,8] {role = param}
    %f0, %f1, %f2 = magi::all_gather_start([%wq.shard, %wk.shard, %wv.shard], group = "dp") : future<f32[8,8]>, future<f32[8,8]>, future<f32[8,8]>
    %wq, %wk, %wv = magi::wait(%f0, %f1, %f2) : f32[8,8], f32[8,8], f32[8,8]
    %tq = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%x, %tq) : f32[3,8]
    %tk = aten::t(%wk) : f32[8,8]strides[1,8]
    %k = aten::mm(%x, %tk) : f32[3,8]
    %tv = aten::t(%wv) : f32[8,8]strides[1,8]
    %v = aten::mm(%x, %tv) : f32[3,8]
    %qk = aten::mul.Tensor(%q, %k) : f32[3,8]
    %y = aten::add.Tensor(%qk, %v, alpha = 1) : f32[3,8]
    output y = %y
  }
}
)";
  CompileOptions options = RecordingOptions();
  absl::StatusOr<CompiledStep> plain = Compile(*ParseModule(kForward), "forward", options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(CountOps(plain->graph(), "aten::mm"), 3);
  EXPECT_EQ(plain->optimized.prep_graph_name, "");
  EXPECT_EQ(plain->prep_executable, nullptr);

  options.optimization.weight_preparation = true;
  const int compiles = RecordingBackend::compiles;
  absl::StatusOr<CompiledStep> step = Compile(*ParseModule(kForward), "forward", options);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(RecordingBackend::compiles, compiles + 2);  // the step and its preparation
  ASSERT_NE(step->prep_executable, nullptr);
  ASSERT_EQ(step->optimized.prep_graph_name, "forward.prep");
  EXPECT_EQ(CountOps(step->graph(), "aten::mm"), 1);
  EXPECT_EQ(CountOps(step->graph(), "aten::cat"), 0);
  EXPECT_EQ(CountOps(step->graph(), kAllGatherStartOp), 1);
  const Value* concat = step->graph().FindValue("wq.shard.concat");
  ASSERT_NE(concat, nullptr);
  EXPECT_TRUE(concat->is_graph_input());
  EXPECT_EQ(concat->role(), InputRole::kParam);
  EXPECT_EQ(step->graph().FindValue("wk.shard"), nullptr);  // only the preparation reads the parts
  const Graph* prep = step->module().FindGraph("forward.prep");
  ASSERT_NE(prep, nullptr);
  EXPECT_EQ(PrintGraph(*prep), R"(  graph @forward.prep {
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    input %wv.shard: f32[4,8] {role = param}
    %wq.shard.concat = aten::cat([%wq.shard, %wk.shard, %wv.shard], 0) : f32[12,8]
    output wq.shard.concat = %wq.shard.concat
  }
)");
  EXPECT_NE(step->plan_hash, plain->plan_hash);
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
  static std::map<std::string, bool> told_deterministic;  // by backend, its last Compile
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph& graph,
                                                      const CompileContext& context) const override {
    told_deterministic[name_] = context.deterministic;
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

std::map<std::string, bool> StubBackend::told_deterministic;

MAGI_REGISTER(Backend, "test-primary", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-primary", StubBackend::Kind::kPrimary, options);
});
MAGI_REGISTER(Backend, "test-flaky", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-flaky", StubBackend::Kind::kFlaky, options);
});
MAGI_REGISTER(Backend, "test-nothing", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<StubBackend>("test-nothing", StubBackend::Kind::kNothing, options);
});

// The stub backends with `partition_backend` taking what it accepts: no canonicalization,
// no notes on stderr.
CompileOptions StubPartitionOptions(const std::string& partition_backend) {
  CompileOptions options;
  options.optimization.canonicalize = "";
  options.backend = "test-primary";
  options.partitioning.backends = {partition_backend};
  options.partitioning.log = false;
  return options;
}

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

// PartitionOptions::recompute_fusible: before the cut, an elementwise activation the
// backend fuses both ways and whose operand the backward reads anyway is recomputed there;
// the driver says so and plans less memory.
TEST(CompilerTest, FusibleActivationsAreRecomputedBeforePartitioning) {
  constexpr char kStep[] = R"(module @m {
  graph @step {
    input %x: f32[64,64]
    input %w: f32[64,64] {role = param}
    input %dy: f32[64,64]
    %h = aten::mm(%x, %w) : f32[64,64] {phase = fwd}
    %s = aten::mul.Tensor(%h, %h) : f32[64,64] {phase = fwd}
    %p = aten::add.Tensor(%s, %h, 1) : f32[64,64] {phase = fwd}
    %y = aten::mm(%p, %w) : f32[64,64] {phase = fwd}
    %d = aten::mm(%dy, %w) : f32[64,64] {phase = bwd}
    %g = aten::mul.Tensor(%d, %s) : f32[64,64] {phase = bwd}
    %g2 = aten::mul.Tensor(%g, %h) : f32[64,64] {phase = bwd}
    output y = %y
    output g2 = %g2
  }
}
)";
  int64_t peaks[2] = {0, 0};
  for (bool recompute : {false, true}) {
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
    ASSERT_TRUE(module.ok()) << module.status();
    CompileOptions options = StubPartitionOptions("test-flaky");
    options.partitioning.recompute_fusible = recompute;
    absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    peaks[recompute] = compiled->optimized.prediction.peak_bytes;
    bool noted = false;
    for (const std::string& note : compiled->notes) {
      noted |= note.rfind("recompute-fusible: 1 activations of @step recomputed in the backward for 'test-flaky'", 0) == 0;
    }
    EXPECT_EQ(noted, recompute) << absl::StrJoin(compiled->notes, "\n");
  }
  EXPECT_LT(peaks[1], peaks[0]);
}

// A copy keeps both operands of `%s = %h1 + %h2` alive until its late backward use, past
// the backward's peak (the 128 KiB cat), where saving %s alone held less: the driver takes
// the rewrite back and says why.
TEST(CompilerTest, RecomputeFusibleIsTakenBackWhenThePeakWouldGrow) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @step {
    input %x: f32[64,64]
    input %w: f32[64,64] {role = param}
    input %dy: f32[64,64]
    %h1 = aten::mm(%x, %w) : f32[64,64] {phase = fwd}
    %h2 = aten::mm(%h1, %w) : f32[64,64] {phase = fwd}
    %s = aten::add.Tensor(%h1, %h2, 1) : f32[64,64] {phase = fwd}
    %p = aten::mul.Tensor(%s, %s) : f32[64,64] {phase = fwd}
    %y = aten::mm(%p, %w) : f32[64,64] {phase = fwd}
    %a1 = aten::mul.Tensor(%dy, %h1) : f32[64,64] {phase = bwd}
    %a2 = aten::mul.Tensor(%a1, %h2) : f32[64,64] {phase = bwd}
    %r = aten::cat([%a2, %a2, %a2, %a2, %a2, %a2, %a2, %a2], 0) : f32[512,64] {phase = bwd}
    %c = aten::slice.Tensor(%r, 0, 0, 64, 1) : f32[64,64] {phase = bwd}
    %c2 = aten::mul.Tensor(%c, %c) : f32[64,64] {phase = bwd}
    %g = aten::mul.Tensor(%c2, %s) : f32[64,64] {phase = bwd}
    output y = %y
    output g = %g
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options = StubPartitionOptions("test-flaky");
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  bool taken_back = false;
  for (const std::string& note : compiled->notes) {
    taken_back |= note.rfind("recompute-fusible: not applied to @step: its planned peak would grow from ", 0) == 0;
  }
  EXPECT_TRUE(taken_back) << absl::StrJoin(compiled->notes, "\n");
  for (const Node* node : compiled->graph().nodes()) EXPECT_NE(node->annotations().remat, RematDecision::kRecompute);
}

TEST(CompilerTest, PartitionsThatFailToCompileFallBackToThePrimaryWithAWarning) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kLayers);
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options = StubPartitionOptions("test-flaky");
  options.partitioning.backend_options["test-flaky"] = {{"tag", "/a/path"}};
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

// A gather whose wait sits inside a chain the partition backend takes (adds): before
// partitioning the driver moves it out (align-collectives), so the chain is one partition.
TEST(CompilerTest, CollectivesInsideAFusibleChainMoveOutBeforePartitioning) {
  constexpr char kChain[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[4,4]
    input %s: f32[2,4] {role = param}
    input %w: f32[4,4] {role = param}
    %a = aten::add.Tensor(%x, %x, 1) : f32[4,4]
    %b = aten::add.Tensor(%a, %a, 1) : f32[4,4]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[4,4]>
    %g = magi::wait(%f) : f32[4,4]
    %c = aten::add.Tensor(%b, %g, 1) : f32[4,4]
    %h = aten::mm(%c, %w) : f32[4,4]
    output y = %h
  }
}
)";
  for (bool align : {true, false}) {
    SCOPED_TRACE(align);
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kChain);
    ASSERT_TRUE(module.ok()) << module.status();
    CompileOptions options = StubPartitionOptions("test-flaky");
    options.partitioning.align_collectives = align;
    absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    ASSERT_TRUE(VerifyModule(compiled->module()).ok());
    EXPECT_EQ(compiled->partitions.size(), align ? 1u : 2u);
    const std::vector<std::string> notes = compiled->notes;
    const bool noted = !notes.empty() && notes[0] ==
                                             "align-collectives: 1 moves of collectives to kernel boundaries of "
                                             "@step before partitioning for 'test-flaky'";
    EXPECT_EQ(noted, align) << (notes.empty() ? "" : notes[0]);
  }
}

// What the partition backend declines is a boundary already: the gather goes only as far
// as the exp it declines, not on to the top.
TEST(CompilerTest, AlignCollectivesStopsAtWhatThePartitionBackendDeclines) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[4,4]
    input %s: f32[2,4] {role = param}
    input %w: f32[4,4] {role = param}
    %a = aten::add.Tensor(%x, %x, 1) : f32[4,4]
    %e = aten::exp(%a) : f32[4,4]
    %b = aten::add.Tensor(%e, %e, 1) : f32[4,4]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[4,4]>
    %g = magi::wait(%f) : f32[4,4]
    %c = aten::add.Tensor(%b, %g, 1) : f32[4,4]
    %h = aten::mm(%c, %w) : f32[4,4]
    output y = %h
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", StubPartitionOptions("test-flaky"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::vector<std::string> ops;
  for (const Node* node : compiled->graph().nodes()) ops.push_back(node->op());
  EXPECT_EQ(ops, (std::vector<std::string>{"magi::call", "aten::exp", "magi::all_gather_start", "magi::wait",
                                           "magi::call", "aten::mm"}));
}

// Moved up to the GEMM, the gathered buffer would be live while the chain's temporaries
// are: a peak over the memory budget, so the driver puts the move back and says why.
TEST(CompilerTest, AlignCollectivesIsUndoneWhenItBreaksTheMemoryBudget) {
  constexpr char kChain[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[256,64]
    input %s: f32[128,64] {role = param}
    input %w: f32[64,256] {role = param}
    %h = aten::mm(%x, %w) : f32[256,256]
    %a = aten::add.Tensor(%h, %h, 1) : f32[256,256]
    %b = aten::add.Tensor(%a, %a, 1) : f32[256,256]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[256,64]>
    %g = magi::wait(%f) : f32[256,64]
    %y = aten::add.Tensor(%g, %g, 1) : f32[256,64]
    output y = %y
    output b = %b
  }
}
)";
  // The peak each way, from the driver's own prediction (no budget: aligned).
  int64_t plain_peak = 0, aligned_peak = 0;
  for (bool align : {false, true}) {
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kChain);
    ASSERT_TRUE(module.ok()) << module.status();
    CompileOptions options = StubPartitionOptions("test-flaky");
    options.partitioning.align_collectives = align;
    absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    (align ? aligned_peak : plain_peak) = compiled->optimized.prediction.peak_bytes;
  }
  ASSERT_GT(aligned_peak, plain_peak);
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kChain);
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options = StubPartitionOptions("test-flaky");
  options.optimization.memory_budget_bytes = plain_peak;
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->optimized.prediction.peak_bytes, plain_peak);
  ASSERT_FALSE(compiled->notes.empty());
  EXPECT_EQ(compiled->notes[0].rfind("align-collectives: not applied to @step: its predicted peak ", 0), 0u)
      << compiled->notes[0];
  EXPECT_EQ(compiled->partitions.size(), 2u);  // the adds stay cut at the gather
}

TEST(CompilerTest, ABackendThatDeclinesEverythingSaysWhy) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kLayers);
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options = StubPartitionOptions("test-nothing");
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_TRUE(compiled->partitions.empty());
  ASSERT_EQ(compiled->notes.size(), 1u);
  EXPECT_EQ(compiled->notes[0],
            "partition backend 'test-nothing': 0 of the 7 nodes of @step in 0 partitions (0 distinct); it declines "
            "every node: unavailable here: no such library; the primary backend 'test-primary' runs them");
}

// A node that writes a donated input's new value from it (a KV cache's scatter) stays with
// the primary backend, which updates the input in place; the same op on other values is
// outlined as usual.
TEST(CompilerTest, DonatedUpdatesStayWithThePrimaryBackend) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @step {
    input %x: f32[4,4]
    input %cache: f32[4,4]
    %a = aten::add.Tensor(%x, %x, 1) : f32[4,4]
    %m = aten::mul.Tensor(%a, %a) : f32[4,4]
    %c = aten::add.Tensor(%cache, %m, 1) : f32[4,4]
    %y = aten::mul.Tensor(%c, %m) : f32[4,4]
    output y = %y
    output cache = %c {aliases = %cache}
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  CompileOptions options = StubPartitionOptions("test-flaky");
  absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const std::string notes = absl::StrJoin(compiled->notes, "\n");
  // The other adds and muls are taken (the flaky backend then fails on the muls: fallbacks).
  EXPECT_NE(notes.find("3 of the 4 nodes of @step"), std::string::npos) << notes;
  EXPECT_NE(notes.find("1 x writes a donated input's new value: the primary backend updates it in place"),
            std::string::npos)
      << notes;
}

// Deterministic mode reaches partition backends too (CompileAll), and the plan hash is
// of the module the primary compiles: after the fallbacks.
TEST(CompilerTest, PartitionBackendsAreToldAndThePlanHashIncludesFallbacks) {
  for (bool deterministic : {true, false}) {
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kLayers);
    ASSERT_TRUE(module.ok()) << module.status();
    CompileOptions options = StubPartitionOptions("test-flaky");
    options.deterministic = deterministic;
    StubBackend::told_deterministic.clear();
    absl::StatusOr<CompiledStep> compiled = Compile(*std::move(module), "step", options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    ASSERT_EQ(compiled->fallen_back.size(), 2u);
    EXPECT_EQ(StubBackend::told_deterministic, (std::map<std::string, bool>{{"test-flaky", deterministic},
                                                                             {"test-primary", deterministic}}));
    EXPECT_EQ(compiled->plan_hash, PlanHash(compiled->module(), options));
  }
}

}  // namespace
}  // namespace magi
