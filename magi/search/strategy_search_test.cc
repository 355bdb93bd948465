#include "magi/search/strategy_search.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "absl/strings/str_cat.h"
#include "magi/ir/graph_utils.h"
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

// The error names the least peak the search can reach and the pipeline that reaches it
// (issue 14, item 5: it used to name the least peak before recompute, while budgets far
// below that figure were met).
TEST(StrategySearchTest, ImpossibleBudgetNamesTheLeastPeakAPipelineReaches) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  auto plan = SearchStrategy(*module, "train_step", H200(), SmallSpace(100000));
  ASSERT_FALSE(plan.ok());
  const std::string message(plan.status().message());
  const std::string lead = "the smallest predicted peak the search reached is ";
  size_t at = message.find(lead);
  ASSERT_NE(at, std::string::npos) << message;
  int64_t reached = std::stoll(message.substr(at + lead.size()));
  size_t with = message.find(", with ", at);
  size_t given = message.find(" (graph as given: ", at);
  ASSERT_TRUE(with != std::string::npos && given != std::string::npos) << message;
  const std::string pipeline = message.substr(with + 7, given - with - 7);
  EXPECT_NE(pipeline.find("auto-recompute{"), std::string::npos) << message;
  absl::StatusOr<SimulationResult> as_given = Simulate(*module->FindGraph("train_step"), H200());
  ASSERT_TRUE(as_given.ok());
  EXPECT_LT(reached, as_given->peak_bytes);
  // That pipeline really reaches that peak...
  std::unique_ptr<Module> copy = CloneModule(*module);
  ASSERT_TRUE(RunPassPipeline(pipeline, *copy).ok()) << pipeline;
  absl::StatusOr<SimulationResult> simulated = Simulate(*copy->FindGraph("train_step"), H200());
  ASSERT_TRUE(simulated.ok());
  EXPECT_EQ(simulated->peak_bytes, reached);
  // ... a budget of exactly that figure is met, and one byte less is not.
  auto at_figure = SearchStrategy(*module, "train_step", H200(), SmallSpace(reached));
  ASSERT_TRUE(at_figure.ok()) << at_figure.status();
  EXPECT_LE(at_figure->chosen.prediction.peak_bytes, reached);
  auto below = SearchStrategy(*module, "train_step", H200(), SmallSpace(reached - 1));
  ASSERT_FALSE(below.ok());
  EXPECT_NE(below.status().message().find(absl::StrCat("reached is ", reached, " bytes")), std::string::npos)
      << below.status();
}

}  // namespace
}  // namespace magi
