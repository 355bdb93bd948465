#include "magi/passes/reshard_after_forward.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/analysis/memory_plan.h"
#include "magi/passes/pass_test_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::CountOps;
using testing::LoadTestdata;
using testing::RunPipeline;

int64_t Peak(const Graph& graph) {
  absl::StatusOr<MemoryPlan> plan = PlanMemory(graph);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->peak_bytes : -1;
}

// The fixture's backward gathers come after some backward uses of forward views of the
// gathered weights (transposes saved in forward), which keep the forward copies alive.
TEST(ReshardAfterForwardTest, ReshardFreesForwardGathersBeforeBackward) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  EXPECT_EQ(Peak(graph), 2310192);
  RunPipeline(*module, "reshard-after-forward{mode=reshard}");
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 10);  // the backward gathers moved up, none added
  EXPECT_EQ(Peak(graph), 1808304);
}

TEST(ReshardAfterForwardTest, KeepDropsBackwardGathersAndReshardBringsThemBack) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  RunPipeline(*module, "reshard-after-forward{mode=keep}");
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 5);
  for (const Node* node : graph.nodes()) {
    if (node->op() == kAllGatherStartOp) {
      EXPECT_NE(node->annotations().phase, Phase::kBackward);
    }
  }
  EXPECT_GE(Peak(graph), 2310192);  // every block's parameters live from forward to backward
  RunPipeline(*module, "reshard-after-forward{mode=reshard},dce");
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 10);
  EXPECT_EQ(Peak(graph), 1808304);
}

TEST(ReshardAfterForwardTest, GroupsChooseWhichToKeep) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  RunPipeline(*module, "reshard-after-forward{groups=layers.3+root,mode=keep}");
  EXPECT_EQ(CountOps(*module->graphs()[0], kAllGatherStartOp), 8);
}

TEST(ReshardAfterForwardTest, ForwardViewsOfGatheredParametersAreCopied) {
  std::string out = testing::RunPassOnText("reshard-after-forward", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[2,4]
    input %w.shard: f32[2,4] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]> {phase = fwd}
    %w = magi::wait(%f) : f32[4,4] {phase = fwd}
    %wt = aten::t(%w) : f32[4,4]strides[1,4] {phase = fwd}
    %y = aten::mm(%x, %wt) : f32[2,4] {phase = fwd}
    %g = aten::mm(%y, %w) : f32[2,4] {phase = bwd}
    %h = aten::mm(%g, %wt) : f32[2,4] {phase = bwd}
    output h = %h
  }
}
)",
                                           /*expect_changed=*/true);
  EXPECT_EQ(out, R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[2,4]
    input %w.shard: f32[2,4] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]> {phase = fwd}
    %w = magi::wait(%f) : f32[4,4] {phase = fwd}
    %wt = aten::t(%w) : f32[4,4]strides[1,4] {phase = fwd}
    %y = aten::mm(%x, %wt) : f32[2,4] {phase = fwd}
    %0 = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]> {phase = bwd}
    %1 = magi::wait(%0) : f32[4,4] {phase = bwd}
    %wt.2 = aten::t(%1) : f32[4,4]strides[1,4] {phase = bwd}
    %g = aten::mm(%y, %1) : f32[2,4] {phase = bwd}
    %h = aten::mm(%g, %wt.2) : f32[2,4] {phase = bwd}
    output h = %h
  }
}
)");
}

// A padded parameter: backward reads a transpose of the slice of the gathered rows (two
// forward views deep); both views are copied onto the backward gather, so the forward
// gather dies with its last forward use (it stayed alive into backward before).
TEST(ReshardAfterForwardTest, ViewsOfViewsOfGatheredParametersAreCopied) {
  std::string out = testing::RunPassOnText("reshard-after-forward", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[2,4]
    input %w.shard: f32[2,4] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]> {phase = fwd}
    %w = magi::wait(%f) : f32[4,4] {phase = fwd}
    %ws = aten::slice.Tensor(%w, 0, 0, 3, 1) : f32[3,4] {phase = fwd}
    %wt = aten::t(%ws) : f32[4,3]strides[1,4] {phase = fwd}
    %y = aten::mm(%x, %wt) : f32[2,3] {phase = fwd}
    %h = aten::mm(%x, %wt) : f32[2,3] {phase = bwd}
    output y = %y
    output h = %h
  }
}
)",
                                           /*expect_changed=*/true);
  EXPECT_NE(out.find(R"(    %0 = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]> {phase = bwd}
    %1 = magi::wait(%0) : f32[4,4] {phase = bwd}
    %ws.2 = aten::slice.Tensor(%1, 0, 0, 3, 1) : f32[3,4] {phase = bwd}
    %wt.3 = aten::t(%ws.2) : f32[4,3]strides[1,4] {phase = bwd}
    %h = aten::mm(%x, %wt.3) : f32[2,3] {phase = bwd})"),
            std::string::npos)
      << out;
}

// Mixed precision: each gather reads its own bf16 cast of the fp32 shard. The backward
// gather of the same shard (through its own cast) is the regather to move up; the
// forward cast must not be gathered again in backward (that kept every forward cast, a
// bf16 copy of the whole model at world 1, alive from forward to backward).
TEST(ReshardAfterForwardTest, MixedPrecisionRegathersThroughTheirOwnCasts) {
  std::string out = testing::RunPassOnText("reshard-after-forward", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: bf16[2,4]
    input %w.shard: f32[2,4] {role = param}
    %c = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[2,4] {phase = fwd}
    %f = magi::all_gather_start([%c], group = "dp") : future<bf16[4,4]> {phase = fwd}
    %w = magi::wait(%f) : bf16[4,4] {phase = fwd}
    %wt = aten::t(%w) : bf16[4,4]strides[1,4] {phase = fwd}
    %y = aten::mm(%x, %wt) : bf16[2,4] {phase = fwd}
    %g = aten::mm(%y, %wt) : bf16[2,4] {phase = bwd}
    %c2 = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[2,4] {phase = bwd}
    %f2 = magi::all_gather_start([%c2], group = "dp") : future<bf16[4,4]> {phase = bwd}
    %w2 = magi::wait(%f2) : bf16[4,4] {phase = bwd}
    %h = aten::mm(%g, %w2) : bf16[2,4] {phase = bwd}
    output h = %h
  }
}
)",
                                           /*expect_changed=*/true);
  EXPECT_EQ(out, R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: bf16[2,4]
    input %w.shard: f32[2,4] {role = param}
    %c = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[2,4] {phase = fwd}
    %f = magi::all_gather_start([%c], group = "dp") : future<bf16[4,4]> {phase = fwd}
    %w = magi::wait(%f) : bf16[4,4] {phase = fwd}
    %wt = aten::t(%w) : bf16[4,4]strides[1,4] {phase = fwd}
    %y = aten::mm(%x, %wt) : bf16[2,4] {phase = fwd}
    %c2 = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[2,4] {phase = bwd}
    %f2 = magi::all_gather_start([%c2], group = "dp") : future<bf16[4,4]> {phase = bwd}
    %w2 = magi::wait(%f2) : bf16[4,4] {phase = bwd}
    %wt.0 = aten::t(%w2) : bf16[4,4]strides[1,4] {phase = bwd}
    %g = aten::mm(%y, %wt.0) : bf16[2,4] {phase = bwd}
    %h = aten::mm(%g, %w2) : bf16[2,4] {phase = bwd}
    output h = %h
  }
}
)");
}

TEST(ReshardAfterForwardTest, BadModeIsAnError) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  auto pass = Registry<Pass>::Global().Create("reshard-after-forward", {{"mode", "sometimes"}});
  ASSERT_FALSE(pass.ok());
  EXPECT_EQ(pass.status().message(), "reshard-after-forward: mode must be one of keep|reshard, not 'sometimes'");
}

}  // namespace
}  // namespace magi
