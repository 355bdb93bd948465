#include "magi/passes/recompute_fusible.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "magi/analysis/memory_plan.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

// A SwiGLU block's forward and the backward autograd records for it: silu(h1) is saved for
// the gradient of h3, and h1, h3 are saved too; the product feeds a GEMM both ways.
constexpr char kSwiGlu[] = R"(module @m {
  graph @g {
    input %x: f32[4,8]
    input %w1: f32[8,16] {role = param}
    input %w3: f32[8,16] {role = param}
    input %w2: f32[16,8] {role = param}
    input %dy: f32[4,8]
    %h1 = aten::mm(%x, %w1) : f32[4,16] {phase = fwd}
    %h3 = aten::mm(%x, %w3) : f32[4,16] {phase = fwd}
    %s = aten::silu(%h1) : f32[4,16] {phase = fwd}
    %p = aten::mul.Tensor(%s, %h3) : f32[4,16] {phase = fwd}
    %y = aten::mm(%p, %w2) : f32[4,8] {phase = fwd}
    %r = aten::relu(%y) : f32[4,8] {phase = fwd}
    %w2t = aten::t(%w2) : f32[8,16]strides[1,8] {phase = bwd}
    %dp = aten::mm(%dy, %w2t) : f32[4,16] {phase = bwd}
    %dh3 = aten::mul.Tensor(%dp, %s) : f32[4,16] {phase = bwd}
    %ds = aten::mul.Tensor(%dp, %h3) : f32[4,16] {phase = bwd}
    %dh1 = aten::silu_backward(%ds, %h1) : f32[4,16] {phase = bwd}
    %pt = aten::t(%p) : f32[16,4]strides[1,16] {phase = bwd}
    %dw2 = aten::mm(%pt, %dy) : f32[16,8] {phase = bwd}
    %dr = aten::mul.Tensor(%dy, %r) : f32[4,8] {phase = bwd}
    output y = %y
    output dh1 = %dh1
    output dh3 = %dh3
    output dw2 = %dw2
    output dr = %dr
  }
}
)";

std::vector<std::string> ChosenNames(const Graph& graph, const DeclinedByBackend& declined = nullptr) {
  std::vector<std::string> names;
  for (const Node* node : ChooseFusibleRecompute(graph, declined)) names.push_back(node->result(0)->name());
  return names;
}

TEST(RecomputeFusibleTest, ChoosesElementwiseValuesWhoseOperandsAreSavedAnyway) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kSwiGlu);
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& graph = *(*module)->FindGraph("g");
  // silu(h1): h1 is saved (silu_backward), it only feeds elementwise ops both ways. Not the
  // product (a GEMM reads it in both directions), not relu(y) (y is not saved: its copy
  // would keep y alive instead).
  EXPECT_EQ(ChosenNames(graph), std::vector<std::string>{"s"});
  // A backend that declines silu: nothing to fuse it into, nothing chosen.
  EXPECT_TRUE(ChosenNames(graph, [](const Node& node) { return node.op() == "aten::silu"; }).empty());
  // Nor when the backward reader of %s is declined (the copy would be a kernel of its own).
  EXPECT_TRUE(ChosenNames(graph, [](const Node& node) { return node.result(0)->name() == "dh3"; }).empty());

  absl::StatusOr<MemoryPlan> before = PlanMemory(graph, /*assign_buffers=*/false);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(RecomputeFusible(graph), 1);
  ASSERT_TRUE(VerifyModule(**module).ok());
  // The backward's reader takes a copy made right before it; the forward %s dies at %p.
  const Node* dh3 = graph.FindValue("dh3")->producer();
  const Node* copy = dh3->operand(1)->producer();
  EXPECT_EQ(copy->op(), "aten::silu");
  EXPECT_EQ(copy->operand(0), graph.FindValue("h1"));
  EXPECT_EQ(copy->annotations().phase, Phase::kBackward);
  std::vector<Node*> nodes = graph.nodes();
  EXPECT_EQ(std::find(nodes.begin(), nodes.end(), copy) + 1, std::find(nodes.begin(), nodes.end(), dh3));
  EXPECT_EQ(graph.FindValue("s")->Users().size(), 1u);  // only the forward product
  absl::StatusOr<MemoryPlan> after = PlanMemory(graph, /*assign_buffers=*/false);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LT(after->peak_bytes, before->peak_bytes);
  // Nothing left to choose.
  EXPECT_EQ(RecomputeFusible(graph), 0);
}

// On the captured tiny Llama step (4 layers, sharded for 2 ranks): per layer SwiGLU's silu
// and RMSNorm's normalized x, nothing else; the planned peak goes down.
TEST(RecomputeFusibleTest, TinyLlamaStepRecomputesSiluAndTheNormalizedActivations) {
  std::unique_ptr<Module> module = testing::LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  Graph& graph = *module->FindGraph("train_step");
  std::map<std::string, int> ops;
  for (const Node* node : ChooseFusibleRecompute(graph)) ++ops[node->op()];
  std::vector<std::string> listed;
  for (const auto& [op, count] : ops) listed.push_back(absl::StrCat(op, " x", count));
  EXPECT_GT(ops["aten::silu"], 0) << absl::StrJoin(listed, ", ");
  EXPECT_GT(ops["aten::mul.Tensor"], 0) << absl::StrJoin(listed, ", ");
  absl::StatusOr<MemoryPlan> before = PlanMemory(graph, /*assign_buffers=*/false);
  ASSERT_TRUE(before.ok()) << before.status();
  testing::RunPipeline(*module, "recompute-fusible");
  absl::StatusOr<MemoryPlan> after = PlanMemory(graph, /*assign_buffers=*/false);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LE(after->peak_bytes, before->peak_bytes);
  std::printf("recompute-fusible on the tiny step: %s; peak %lld -> %lld bytes\n", absl::StrJoin(listed, ", ").c_str(),
              static_cast<long long>(before->peak_bytes), static_cast<long long>(after->peak_bytes));
}

// Not chosen: a value whose view leaves the graph (kept alive anyway), and a random op.
TEST(RecomputeFusibleTest, ViewsThatAreOutputsAndRandomOpsAreNotChosen) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[4,16]
    input %dy: f32[4,16]
    %h = aten::exp(%x) : f32[4,16] {phase = fwd}
    %s = aten::neg(%h) : f32[4,16] {phase = fwd}
    %sv = aten::view(%s, [64]) : f32[64] {phase = fwd}
    %d = aten::dropout(%h, 0.5, true) : f32[4,16] {phase = fwd}
    %u = aten::mul.Tensor(%s, %d) : f32[4,16] {phase = fwd}
    %g1 = aten::mul.Tensor(%dy, %s) : f32[4,16] {phase = bwd}
    %g2 = aten::mul.Tensor(%g1, %d) : f32[4,16] {phase = bwd}
    %g3 = aten::mul.Tensor(%g2, %h) : f32[4,16] {phase = bwd}
    output u = %u
    output sv = %sv
    output g3 = %g3
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_TRUE(ChosenNames(*(*module)->FindGraph("g")).empty());
}

TEST(RecomputeFusibleTest, TakesNoOptions) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kSwiGlu);
  ASSERT_TRUE(module.ok());
  absl::StatusOr<bool> ran = RunPassPipeline("recompute-fusible{x=1}", **module);
  EXPECT_EQ(ran.status().message(), "recompute-fusible: unknown option 'x'; there are no options");
}

}  // namespace
}  // namespace magi
