#include "magi/passes/fsdp/shard_for_fsdp.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

// A two-layer step as capture writes it (fwd/bwd phases, parameter inputs, grad outputs).
constexpr absl::string_view kStep = R"(module @m {
  graph @train_step {
    input %w1: f32[5,4] {role = param}
    input %w2: f32[3,5] {role = param}
    input %x: f32[2,4]
    %t1 = aten::t(%w1) : f32[4,5]strides[1,4] {module = "l1", phase = fwd}
    %h = aten::mm(%x, %t1) : f32[2,5] {module = "l1", phase = fwd}
    %t2 = aten::t(%w2) : f32[5,3]strides[1,5] {module = "l2", phase = fwd}
    %y = aten::mm(%h, %t2) : f32[2,3] {module = "l2", phase = fwd}
    %loss = aten::sum(%y, none) : f32[] {phase = fwd}
    %gy = aten::mul.Scalar(%y, 0.0) : f32[2,3] {phase = bwd}
    %gyt = aten::t(%gy) : f32[3,2]strides[1,3] {phase = bwd}
    %gw2 = aten::mm(%gyt, %h) : f32[3,5] {module = "l2", phase = bwd}
    %gh = aten::mm(%gy, %w2) : f32[2,5] {module = "l2", phase = bwd}
    %ght = aten::t(%gh) : f32[5,2]strides[1,5] {phase = bwd}
    %gw1 = aten::mm(%ght, %x) : f32[5,4] {module = "l1", phase = bwd}
    output loss = %loss
    output w1.grad = %gw1
    output w2.grad = %gw2
  }
}
)";

struct Counts {
  int gathers = 0, reduce_scatters = 0, waits = 0, adamw = 0;
};

Counts Count(const Graph& graph) {
  Counts c;
  for (const Node* node : graph.nodes()) {
    c.gathers += node->op() == kAllGatherStartOp;
    c.reduce_scatters += node->op() == kReduceScatterStartOp;
    c.waits += node->op() == kWaitOp;
    c.adamw += node->op() == "magi::adamw";
  }
  return c;
}

std::unique_ptr<Module> Shard(const FsdpPlan& plan) {
  auto module = ParseModule(kStep);
  EXPECT_TRUE(module.ok()) << module.status();
  absl::Status status = ShardForFsdp(**module, *(*module)->FindGraph("train_step"), plan);
  EXPECT_TRUE(status.ok()) << status;
  absl::Status verified = VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified << "\n" << PrintModule(**module);
  return *std::move(module);
}

FsdpPlan TwoGroups(bool reshard_l2) {
  FsdpPlan plan;
  plan.world_size = 2;
  plan.groups = {{"l1", {"w1"}, true}, {"l2", {"w2"}, reshard_l2}};
  return plan;
}

TEST(ShardForFsdpTest, ShardsGathersReducesAndStepsInOneGraph) {
  std::unique_ptr<Module> module = Shard(TwoGroups(/*reshard_l2=*/true));
  Graph* graph = module->FindGraph("train_step");
  EXPECT_EQ(graph->FindValue("w1"), nullptr);
  EXPECT_EQ(graph->FindValue("w1.shard")->type().ToString(), "f32[3,4]");  // ceil(5/2) rows
  EXPECT_EQ(graph->FindValue("w2.shard")->type().ToString(), "f32[2,5]");
  EXPECT_EQ(module->FindProcessGroup("dp")->size, 2);
  Counts c = Count(*graph);
  EXPECT_EQ(c.gathers, 3);  // l1 forward, l2 forward, l2 again in backward (resharded)
  EXPECT_EQ(c.reduce_scatters, 2);
  EXPECT_EQ(c.waits, 5);
  EXPECT_EQ(c.adamw, 2);  // one magi::adamw per parameter
  std::vector<std::string> outputs;
  for (const GraphOutput& o : graph->outputs()) outputs.push_back(o.name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "w1.shard", "w1.exp_avg", "w1.exp_avg_sq", "w2.shard",
                                               "w2.exp_avg", "w2.exp_avg_sq"}));
  std::string text = PrintModule(*module);
  // The padded gradient of w1 (5 rows -> 6) and the slice of the gathered weight back to 5.
  EXPECT_NE(text.find("aten::constant_pad_nd(%gw1, [0, 0, 0, 1], 0) : f32[6,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::slice.Tensor("), std::string::npos);
  EXPECT_NE(text.find("reduce_op = \"avg\""), std::string::npos);
}

TEST(ShardForFsdpTest, KeepingGatheredParametersSkipsTheBackwardGather) {
  std::unique_ptr<Module> module = Shard(TwoGroups(/*reshard_l2=*/false));
  EXPECT_EQ(Count(*module->FindGraph("train_step")).gathers, 2);
}

TEST(ShardForFsdpTest, WorldOfOneAndMixedPrecision) {
  FsdpPlan plan = TwoGroups(true);
  plan.world_size = 1;
  plan.optimizer = false;
  plan.reduce_dtype = DType::kFloat64;
  std::unique_ptr<Module> module = Shard(plan);
  Graph* graph = module->FindGraph("train_step");
  EXPECT_EQ(graph->FindValue("w1.shard")->type().ToString(), "f32[5,4]");
  ASSERT_GE(graph->FindOutput("w1.grad.shard"), 0);
  // Reduced in f64, cast back to the shard's f32.
  EXPECT_EQ(graph->outputs()[graph->FindOutput("w1.grad.shard")].value->type().ToString(), "f32[5,4]");
  EXPECT_NE(PrintModule(*module).find("future<f64[5,4]>"), std::string::npos);
}

TEST(ShardForFsdpTest, BadPlans) {
  auto module = ParseModule(kStep);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("train_step");
  FsdpPlan twice = TwoGroups(true);
  twice.groups[1].params.push_back("w1");
  EXPECT_EQ(ShardForFsdp(**module, *graph, twice).message(), "parameter w1 is in two FSDP groups");
  FsdpPlan missing = TwoGroups(true);
  missing.groups[0].params = {"w9"};
  EXPECT_EQ(ShardForFsdp(**module, *graph, missing).message(), "FSDP group 'l1': no parameter input %w9");
}

}  // namespace
}  // namespace magi
