#include "magi/passes/auto_recompute.h"

#include "gtest/gtest.h"
#include "magi/analysis/memory_plan.h"
#include "magi/base/gtest_printers.h"
#include "magi/cost/cost_model.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

using testing::LoadTestdata;

int64_t Peak(const Graph& graph) {
  absl::StatusOr<MemoryPlan> plan = PlanMemory(graph);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->peak_bytes : -1;
}

AutoRecompute MakePass(int64_t budget) { return AutoRecompute(budget, CostModel(*LoadDeviceProfile("cpu"))); }

TEST(AutoRecomputeTest, RecomputesTheCheapestActivationsUntilTheStepFits) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  testing::RunPipeline(*module, "reshard-after-forward{mode=reshard}");
  Graph& graph = *module->graphs()[0];
  // This tiny step is mostly parameters and optimizer state: recomputing every
  // activation takes its peak from 1,808,304 bytes down to 1,694,384.
  const int64_t peak = Peak(graph);
  ASSERT_EQ(peak, 1808304);
  const int64_t budget = 1750000;
  AutoRecompute pass = MakePass(budget);
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(VerifyModule(*module).ok());
  EXPECT_LE(Peak(graph), budget);
  EXPECT_EQ(pass.report().peak_before, peak);
  EXPECT_EQ(pass.report().peak_after, Peak(graph));
  EXPECT_GT(pass.report().recomputed, 0);
  EXPECT_GT(pass.report().recompute_seconds, 0);
  // Copies are backward nodes marked as recomputed; their originals are marked too.
  int copies = 0, marked = 0;
  for (const Node* node : graph.nodes()) {
    if (node->annotations().remat != RematDecision::kRecompute) continue;
    (node->annotations().phase == Phase::kBackward ? copies : marked) += 1;
  }
  EXPECT_EQ(copies, pass.report().recomputed);
  EXPECT_GE(marked, 1);
}

// With an undo log the pass's rewrite can be taken back exactly (what searches do to
// evaluate many plans on one graph), and rewriting again gives the same graph.
TEST(AutoRecomputeTest, UndoTakesTheRewriteBackExactly) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  testing::RunPipeline(*module, "reshard-after-forward{mode=reshard},schedule-overlap{prefetch=2}");
  Graph& graph = *module->graphs()[0];
  const std::string before = PrintModule(*module);
  AutoRecompute probe = MakePass(1);  // too small: reports the floor
  ASSERT_FALSE(probe.Run(*module).ok());
  ASSERT_EQ(PrintModule(*module), before);
  const int64_t budget = (probe.report().peak_before + probe.report().peak_floor) / 2;
  AutoRecompute pass = MakePass(budget);
  RecomputeUndo undo;
  pass.set_undo_log(&undo);
  ASSERT_TRUE(pass.Run(*module).ok());
  EXPECT_GT(undo.copies.size(), 0u);
  EXPECT_LE(Peak(graph), budget);
  const int nodes_after = graph.num_nodes();
  UndoRecompute(graph, undo);
  EXPECT_TRUE(undo.copies.empty());
  ASSERT_TRUE(VerifyModule(*module).ok());
  EXPECT_EQ(PrintModule(*module), before);
  // The same rewrite again (the probes left nothing behind that changes the choice).
  AutoRecompute again = MakePass(budget);
  ASSERT_TRUE(again.Run(*module).ok());
  EXPECT_EQ(graph.num_nodes(), nodes_after);
  EXPECT_EQ(again.report().recomputed, pass.report().recomputed);
  EXPECT_EQ(again.report().peak_after, pass.report().peak_after);
}

// On the 8B-shaped step recomputing every activation peaks higher (9,738,799,152
// bytes) than the step as given (9,710,980,144): the copies keep the values they read
// alive into backward. A shorter prefix gets under 9.6 GB, which the pass finds by
// trying halving prefixes before giving up.
TEST(AutoRecomputeTest, FitsWhereRecomputingEverythingWouldNot) {
  auto module = LoadTestdata("step8b_4layers.mir");
  ASSERT_NE(module, nullptr);
  Graph& graph = *module->graphs()[0];
  ASSERT_EQ(Peak(graph), 9710980144);
  AutoRecompute pass(9600000000, CostModel(*LoadDeviceProfile("h200")));
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_LE(Peak(graph), 9600000000);
  EXPECT_LT(pass.report().peak_floor, 9600000000);
  auto again = LoadTestdata("step8b_4layers.mir");
  AutoRecompute too_tight(9000000000, CostModel(*LoadDeviceProfile("h200")));
  absl::StatusOr<bool> failed = too_tight.Run(*again);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.status().message().find("at 9738799152 with all"), std::string::npos) << failed.status();
  EXPECT_NE(failed.status().message().find("at best"), std::string::npos) << failed.status();
}

// The pass only needs the per-node cost interface: with every node equally expensive
// the ranking is by bytes alone, and the step still fits.
class UniformCost : public NodeCostOracle {
 public:
  double NodeSeconds(const Node&) const override { return 1e-6; }
};

TEST(AutoRecomputeTest, RanksWithAnyNodeCostOracle) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  testing::RunPipeline(*module, "reshard-after-forward{mode=reshard}");
  const int64_t budget = 1750000;
  AutoRecompute pass(budget, UniformCost());
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_LE(Peak(*module->graphs()[0]), budget);
  EXPECT_NEAR(pass.report().recompute_seconds, 1e-6 * pass.report().recomputed, 1e-12);
}

TEST(AutoRecomputeTest, ALowerBudgetRecomputesMore) {
  auto loose = LoadTestdata("llama4_fsdp_step.mir");
  auto tight = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(loose, nullptr);
  ASSERT_NE(tight, nullptr);
  testing::RunPipeline(*loose, "reshard-after-forward{mode=reshard}");
  testing::RunPipeline(*tight, "reshard-after-forward{mode=reshard}");
  AutoRecompute loose_pass = MakePass(1790000);
  AutoRecompute tight_pass = MakePass(1710000);
  ASSERT_TRUE(loose_pass.Run(*loose).ok());
  ASSERT_TRUE(tight_pass.Run(*tight).ok());
  EXPECT_LE(Peak(*loose->graphs()[0]), 1790000);
  EXPECT_LE(Peak(*tight->graphs()[0]), 1710000);
  EXPECT_GT(tight_pass.report().recomputed, loose_pass.report().recomputed);
  EXPECT_GT(tight_pass.report().recompute_seconds, loose_pass.report().recompute_seconds);
}

TEST(AutoRecomputeTest, FittingStepIsUnchanged) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  std::string before = PrintModule(*module);
  AutoRecompute pass = MakePass(Peak(*module->graphs()[0]));
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(PrintModule(*module), before);
}

TEST(AutoRecomputeTest, ImpossibleBudgetNamesTheSmallestReachablePeak) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  AutoRecompute pass = MakePass(1000);
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(changed.status().message().find("cannot fit 1000 bytes"), std::string::npos) << changed.status();
}

// The rewrite itself, on a graph small enough to read: %a and %b are saved for backward;
// recomputing %b (cheap, large) copies exp and its view next to their backward use.
TEST(AutoRecomputeTest, RewriteCopiesTheForwardChainBeforeItsBackwardUse) {
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[64]
    %a = aten::neg(%x) : f32[64] {phase = fwd}
    %b = aten::exp(%a) : f32[64] {phase = fwd}
    %v = aten::view(%b, [8, 8]) : f32[8,8] {phase = fwd}
    %s = aten::sum(%v, none) : f32[] {phase = fwd}
    %g = aten::mul.Scalar(%a, 2.0) : f32[64] {phase = bwd}
    %h = aten::mul.Tensor(%v, %s) : f32[8,8] {phase = bwd}
    output g = %g
    output h = %h
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& graph = *(*module)->FindGraph("g");
  Node* exp = graph.FindValue("b")->producer();
  std::vector<Node*> copies = RecomputeForBackward(graph, {exp});
  EXPECT_EQ(copies.size(), 2u);  // exp and its view
  ASSERT_TRUE(VerifyModule(**module).ok());
  EXPECT_EQ(PrintModule(**module), R"(module @m {
  graph @g {
    input %x: f32[64]
    %a = aten::neg(%x) : f32[64] {phase = fwd}
    %b = aten::exp(%a) : f32[64] {remat = recompute, phase = fwd}
    %v = aten::view(%b, [8, 8]) : f32[8,8] {remat = recompute, phase = fwd}
    %s = aten::sum(%v, none) : f32[] {phase = fwd}
    %g = aten::mul.Scalar(%a, 2.0) : f32[64] {phase = bwd}
    %b.0 = aten::exp(%a) : f32[64] {remat = recompute, phase = bwd}
    %v.1 = aten::view(%b.0, [8, 8]) : f32[8,8] {remat = recompute, phase = bwd}
    %h = aten::mul.Tensor(%v.1, %s) : f32[8,8] {phase = bwd}
    output g = %g
    output h = %h
  }
}
)");
}

TEST(AutoRecomputeTest, OptionsAreChecked) {
  for (const char* spec :
       {"auto-recompute", "auto-recompute{budget_gb=-1}", "auto-recompute{budget_mb=1,profile=tpu}",
        "auto-recompute{memory=1}", "auto-recompute{budget_mb=nan}", "auto-recompute{budget_gb=inf}",
        "auto-recompute{budget_mb=-inf}", "auto-recompute{budget_gb=1e300}", "auto-recompute{budget_mb=0}"}) {
    absl::StatusOr<PassPipeline> pipeline = ParsePassPipeline(spec);
    ASSERT_TRUE(pipeline.ok()) << spec;
    PassManager manager;
    EXPECT_FALSE(manager.AddPipeline(*pipeline).ok()) << spec;
  }
}

}  // namespace
}  // namespace magi
