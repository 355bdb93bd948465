#include "magi/passes/schedule_overlap.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/cost/simulator.h"
#include "magi/ir/collectives.h"
#include "magi/ir/printer.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/schedule_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::LoadTestdata;
using testing::RunPipeline;

std::vector<Node*> Starts(const Graph& graph, absl::string_view op) {
  std::vector<Node*> starts;
  for (Node* node : graph.nodes()) {
    if (node->op() == op) starts.push_back(node);
  }
  return starts;
}

Node* WaitOf(const Node& start) { return start.result(0)->Users().front(); }

TEST(ScheduleOverlapTest, GathersAreIssuedOneAheadAcrossLayersAndPhases) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  std::vector<std::string> order_before;
  for (const Node* start : Starts(graph, kAllGatherStartOp)) order_before.push_back(start->result(0)->name());
  RunPipeline(*module, "schedule-overlap{prefetch=1}");
  std::vector<Node*> gathers = Starts(graph, kAllGatherStartOp);
  ASSERT_EQ(gathers.size(), 10u);
  auto positions = NodePositions(graph);
  EXPECT_EQ(positions.at(gathers[0]), 0);  // the first one goes to the top
  for (size_t i = 1; i < gathers.size(); ++i) {
    // Issued right after the previous gather's wait, i.e. one group ahead of its use,
    // including the first backward gather, which now overlaps the last forward block.
    EXPECT_EQ(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i - 1])) + 1) << i;
    EXPECT_LT(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i])));
    EXPECT_EQ(gathers[i]->annotations().stream, 1);
  }
  // The order of collectives is unchanged (hang safety on every rank).
  for (size_t i = 0; i < gathers.size(); ++i) EXPECT_EQ(gathers[i]->result(0)->name(), order_before[i]);
  for (const Node* node : graph.nodes()) EXPECT_EQ(node->annotations().schedule, positions.at(node));
}

TEST(ScheduleOverlapTest, ReduceScatterWaitsSinkButNotPastTheNextOne) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  RunPipeline(*module, "schedule-overlap{prefetch=0}");
  std::vector<Node*> scatters = Starts(graph, kReduceScatterStartOp);
  ASSERT_EQ(scatters.size(), 5u);
  auto positions = NodePositions(graph);
  for (size_t i = 0; i < scatters.size(); ++i) {
    EXPECT_EQ(scatters[i]->annotations().stream, 2);
    Node* wait = WaitOf(*scatters[i]);
    // Backward compute now runs between start and wait...
    EXPECT_GT(positions.at(wait), positions.at(scatters[i]) + 1) << i;
    // ...but the wait comes before the group's next reduce-scatter.
    if (i + 1 < scatters.size()) {
      EXPECT_EQ(positions.at(wait) + 1, positions.at(scatters[i + 1])) << i;
    }
  }
}

TEST(ScheduleOverlapTest, OverlapHidesCommunicationInTheSimulator) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<DeviceProfile> profile = LoadDeviceProfile("h200");
  ASSERT_TRUE(profile.ok());
  CostModel model(*profile);
  auto before = Simulate(*module->graphs()[0], model);
  ASSERT_TRUE(before.ok()) << before.status();
  RunPipeline(*module, "schedule-overlap{prefetch=2}");
  auto after = Simulate(*module->graphs()[0], model);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NEAR(after->communication_seconds, before->communication_seconds, 1e-12);
  EXPECT_LT(after->exposed_communication_seconds, 0.5 * before->exposed_communication_seconds);
  EXPECT_LT(after->step_seconds, before->step_seconds);
  EXPECT_GE(after->peak_bytes, before->peak_bytes);  // prefetching holds parameters longer
}

TEST(ScheduleOverlapTest, InflightLimitBoundsPrefetch) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  // One block gathers 135,168 bytes: with 0.2 MB in flight, never two at once, so each
  // gather waits for the previous one (prefetch 3 shrinks to 1).
  RunPipeline(*module, "schedule-overlap{prefetch=3,max_inflight_mb=0.2}");
  auto positions = NodePositions(graph);
  std::vector<Node*> gathers = Starts(graph, kAllGatherStartOp);
  for (size_t i = 1; i < gathers.size(); ++i) {
    EXPECT_GT(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i - 1]))) << i;
  }
  // Without the limit, three are in flight at the top.
  auto unlimited = LoadTestdata("llama4_fsdp_step.mir");
  RunPipeline(*unlimited, "schedule-overlap{prefetch=3}");
  auto unlimited_positions = NodePositions(*unlimited->graphs()[0]);
  std::vector<Node*> unlimited_gathers = Starts(*unlimited->graphs()[0], kAllGatherStartOp);
  EXPECT_EQ(unlimited_positions.at(unlimited_gathers[2]), 2);
}

TEST(ScheduleOverlapTest, PerGatherDistancesOverrideTheDefault) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  // The root group's backward gather stays where it was; every other gather is issued
  // one ahead; layers.3's backward gather, asked to go two ahead, is stopped by the
  // rule that keeps the issue order: right after the root's start.
  RunPipeline(*module, "schedule-overlap{prefetch=1,per_gather=root.bwd.0+layers.3.bwd.2}");
  std::vector<Node*> gathers = Starts(graph, kAllGatherStartOp);
  ASSERT_EQ(gathers.size(), 10u);
  auto positions = NodePositions(graph);
  for (size_t i = 1; i < gathers.size(); ++i) {
    std::string key = GatherKey(*gathers[i]);
    if (key == "root.bwd") {
      EXPECT_GT(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i - 1])) + 1) << key;
    } else if (key == "layers.3.bwd") {
      EXPECT_EQ(positions.at(gathers[i]), positions.at(gathers[i - 1]) + 1) << key;
      EXPECT_LT(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i - 1]))) << key;
    } else {
      EXPECT_EQ(positions.at(gathers[i]), positions.at(WaitOf(*gathers[i - 1])) + 1) << key;
    }
  }
  EXPECT_EQ(GatherKey(*gathers[0]), "root.fwd");
  EXPECT_EQ(GatherKey(*gathers[1]), "layers.0.fwd");
  // With prefetch=0 only the named gathers move.
  auto only = LoadTestdata("llama4_fsdp_step.mir");
  RunPipeline(*only, "schedule-overlap{prefetch=0,per_gather=layers.2.fwd.1}");
  std::vector<Node*> only_gathers = Starts(*only->graphs()[0], kAllGatherStartOp);
  auto only_positions = NodePositions(*only->graphs()[0]);
  EXPECT_EQ(only_positions.at(only_gathers[3]), only_positions.at(WaitOf(*only_gathers[2])) + 1);
  EXPECT_GT(only_positions.at(only_gathers[2]), only_positions.at(WaitOf(*only_gathers[1])) + 1);
}

TEST(ScheduleOverlapTest, PerGatherTextRoundTripsAndBadEntriesAreRefused) {
  absl::StatusOr<PerGatherPrefetch> parsed = ParsePerGatherPrefetch("root.bwd.0+layers.31.fwd.2");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->at("root.bwd"), 0);
  EXPECT_EQ(parsed->at("layers.31.fwd"), 2);
  EXPECT_EQ(FormatPerGatherPrefetch(*parsed), "layers.31.fwd.2+root.bwd.0");
  for (const char* bad : {"root.0", "layers.1.bwd", "layers.1.bwd.x", "layers.1.bwd.-1", ".bwd.1", "root.bwd.1+root.bwd.2",
                          "layers.1.mid.1", "root.bwd.65"}) {
    EXPECT_EQ(ParsePerGatherPrefetch(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::StatusOr<std::unique_ptr<Pass>> pass =
      Registry<Pass>::Global().Create("schedule-overlap", {{"per_gather", "layers.1.fwd"}});
  ASSERT_FALSE(pass.ok());
  EXPECT_EQ(pass.status().message(),
            "schedule-overlap: per_gather must be entries GROUP.fwd.N or GROUP.bwd.N joined by + (GROUP a module "
            "path or root, N in 0..64, each GROUP.PHASE once), not 'layers.1.fwd'");
}

TEST(ScheduleOverlapTest, Deterministic) {
  auto a = LoadTestdata("llama4_fsdp_step.mir");
  auto b = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  RunPipeline(*a, "bucket-collectives{max_mb=0.3},schedule-overlap{prefetch=2}");
  RunPipeline(*b, "bucket-collectives{max_mb=0.3},schedule-overlap{prefetch=2}");
  EXPECT_EQ(PrintModule(*a), PrintModule(*b));
}

}  // namespace
}  // namespace magi
