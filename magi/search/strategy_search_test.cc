#include "magi/search/strategy_search.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

using testing::LoadTestdata;

CostModel H200() { return CostModel(*LoadDeviceProfile("h200")); }

// A smaller space than the default keeps the test quick in unoptimized builds.
SearchOptions SmallSpace(int64_t budget = 0) {
  SearchOptions options;
  options.memory_budget_bytes = budget;
  options.bucket_mb = {0, 1};
  options.prefetch = {-1, 0, 2};
  return options;
}

TEST(StrategySearchTest, PicksTheFastestPlanThatFitsAndBeatsTheGraphAsGiven) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StrategyPlan> plan = SearchStrategy(*module, "train_step", H200(), SmallSpace());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->candidates.size(), 12u);
  EXPECT_TRUE(plan->chosen.fits);
  EXPECT_LT(plan->chosen.prediction.step_seconds, plan->baseline.step_seconds);
  EXPECT_LT(plan->chosen.prediction.exposed_communication_seconds, plan->baseline.exposed_communication_seconds);
  for (const StrategyCandidate& candidate : plan->candidates) {
    if (candidate.fits) {
      EXPECT_GE(candidate.prediction.step_seconds, plan->chosen.prediction.step_seconds);
    }
  }
  std::string table = FormatStrategyPlan(*plan);
  EXPECT_NE(table.find("chosen: " + plan->pipeline), std::string::npos) << table;
  // The plan carries the module it predicted; its text recipe rebuilds the same graph.
  ASSERT_NE(plan->optimized, nullptr);
  ASSERT_TRUE(VerifyModule(*plan->optimized).ok());
  absl::StatusOr<SimulationResult> applied = Simulate(*plan->optimized->FindGraph("train_step"), H200());
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->step_seconds, plan->chosen.prediction.step_seconds);
  EXPECT_EQ(applied->peak_bytes, plan->chosen.prediction.peak_bytes);
  ASSERT_TRUE(RunPassPipeline(plan->pipeline, *module).ok());
  EXPECT_EQ(PrintModule(*module), PrintModule(*plan->optimized));
}

TEST(StrategySearchTest, TightBudgetTradesTimeForMemory) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  // Below every plan without recompute (1,808,304 bytes at best).
  absl::StatusOr<StrategyPlan> plan = SearchStrategy(*module, "train_step", H200(), SmallSpace(1750000));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LE(plan->chosen.prediction.peak_bytes, 1750000);
  EXPECT_GT(plan->chosen.recomputed_nodes, 0);
  EXPECT_NE(plan->pipeline.find("auto-recompute{budget_mb=1.750000"), std::string::npos) << plan->pipeline;
  ASSERT_NE(plan->optimized, nullptr);
  absl::StatusOr<SimulationResult> applied = Simulate(*plan->optimized->FindGraph("train_step"), H200());
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->peak_bytes, plan->chosen.prediction.peak_bytes);
  ASSERT_TRUE(RunPassPipeline(plan->pipeline, *module).ok());
  EXPECT_EQ(PrintModule(*module), PrintModule(*plan->optimized));
}

TEST(StrategySearchTest, SameInputSamePlan) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  auto a = SearchStrategy(*module, "train_step", H200(), SmallSpace(1790000));
  auto b = SearchStrategy(*module, "train_step", H200(), SmallSpace(1790000));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->pipeline, b->pipeline);
  EXPECT_EQ(a->chosen.prediction.step_seconds, b->chosen.prediction.step_seconds);
}

TEST(StrategySearchTest, ImpossibleBudgetIsAClearError) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  auto plan = SearchStrategy(*module, "train_step", H200(), SmallSpace(100000));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("no strategy fits 100000 bytes"), std::string::npos) << plan.status();
  EXPECT_EQ(SearchStrategy(*module, "nope", H200()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace magi
