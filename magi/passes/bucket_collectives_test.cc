#include "magi/passes/bucket_collectives.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/analysis/memory_plan.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

using testing::CountOps;
using testing::LoadTestdata;
using testing::RunPipeline;

// The fixture: 4 decoder blocks + root, 2 ranks. Each block gathers 135,168 bytes and
// reduce-scatters as many; the root 128,256.
TEST(BucketCollectivesTest, LargeBucketsFuseEachPhaseIntoOneCollective) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->graphs()[0];
  ASSERT_EQ(CountOps(graph, kAllGatherStartOp), 10);
  ASSERT_EQ(CountOps(graph, kReduceScatterStartOp), 5);
  RunPipeline(*module, "bucket-collectives{max_mb=1000}");
  // One gather for forward, one for backward (buckets never span phases), one reduce-scatter.
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 2);
  EXPECT_EQ(CountOps(graph, kReduceScatterStartOp), 1);
  EXPECT_EQ(CountOps(graph, kWaitOp), 3);
  for (const Node* node : graph.nodes()) {
    if (IsCollectiveStart(node->op())) {
      EXPECT_GE(node->annotations().bucket, 0);
      EXPECT_EQ(node->num_operands(), 39);  // 4 blocks x 9 parameters + 3 of the root
    }
  }
}

TEST(BucketCollectivesTest, SizeLimitDecidesWhatFuses) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  RunPipeline(*module, "bucket-collectives{max_mb=0.3}");
  const Graph& graph = *module->graphs()[0];
  // Forward root+l0, l1+l2, l3; backward root+l3, l2+l1, l0; reduce-scatters l3+l2, l1+l0, root.
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 6);
  EXPECT_EQ(CountOps(graph, kReduceScatterStartOp), 3);
  for (const Node* node : graph.nodes()) {
    if (IsCollectiveStart(node->op())) {
      EXPECT_LE(BucketCollectives::BucketBytes(*node), 300000) << node->DebugName();
    }
  }
}

TEST(BucketCollectivesTest, ZeroLimitChangesNothing) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  std::string before = PrintModule(*module);
  BucketCollectivesOptions options;
  options.max_mb = 0;
  BucketCollectives pass(options);
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(PrintModule(*module), before);
}

TEST(BucketCollectivesTest, OnlyOneKindWhenAsked) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  RunPipeline(*module, "bucket-collectives{kinds=reduce_scatter,max_mb=1000}");
  EXPECT_EQ(CountOps(*module->graphs()[0], kAllGatherStartOp), 10);
  EXPECT_EQ(CountOps(*module->graphs()[0], kReduceScatterStartOp), 1);
}

// Every rank runs the pass on its own copy of the same graph: the results, and so the
// order of collectives on each process group, must be identical.
TEST(BucketCollectivesTest, DeterministicAcrossRuns) {
  auto a = LoadTestdata("llama4_fsdp_step.mir");
  auto b = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  RunPipeline(*a, "bucket-collectives{max_mb=0.3}");
  RunPipeline(*b, "bucket-collectives{max_mb=0.3}");
  EXPECT_EQ(PrintModule(*a), PrintModule(*b));
}

// A fused reduce-scatter of gradients made at different times sits at the later start,
// and the gathered results keep feeding the same users.
TEST(BucketCollectivesTest, ReduceScattersFuseAtTheLaterStart) {
  std::string out = testing::RunPassOnText("bucket-collectives", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4,2]
    %ga = aten::neg(%a) : f32[4,2]
    %f0 = magi::reduce_scatter_start([%ga], group = "dp", reduce_op = "avg") : future<f32[2,2]>
    %sa = magi::wait(%f0) : f32[2,2]
    %gb = aten::exp(%a) : f32[4,2]
    %f1 = magi::reduce_scatter_start([%gb], group = "dp", reduce_op = "avg") : future<f32[2,2]>
    %sb = magi::wait(%f1) : f32[2,2]
    %u = aten::add.Tensor(%sa, %sb, alpha = 1) : f32[2,2]
    output u = %u
  }
}
)",
                                           /*expect_changed=*/true);
  EXPECT_EQ(out, R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4,2]
    %ga = aten::neg(%a) : f32[4,2]
    %gb = aten::exp(%a) : f32[4,2]
    %0, %1 = magi::reduce_scatter_start([%ga, %gb], group = "dp", reduce_op = "avg") : future<f32[2,2]>, future<f32[2,2]> {bucket = 0}
    %2, %3 = magi::wait(%0, %1) : f32[2,2], f32[2,2] {bucket = 0}
    %u = aten::add.Tensor(%2, %3, alpha = 1) : f32[2,2]
    output u = %u
  }
}
)");
}

TEST(BucketCollectivesTest, BadOptionsAreErrors) {
  absl::StatusOr<PassPipeline> pipeline = ParsePassPipeline("bucket-collectives{max_mb=lots}");
  ASSERT_TRUE(pipeline.ok());
  PassManager manager;
  absl::Status status = manager.AddPipeline(*pipeline);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("max_mb"), std::string::npos) << status;
}

}  // namespace
}  // namespace magi
