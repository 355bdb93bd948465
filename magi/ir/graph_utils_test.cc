#include "magi/ir/graph_utils.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/test_modules.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

constexpr absl::string_view kDiamond = R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::relu(%x) : f32[4]
    %b = aten::neg(%x) : f32[4]
    %c = aten::add.Tensor(%a, %b) : f32[4]
    %d = aten::exp(%c) : f32[4]
    output d = %d
  }
}
)";

std::vector<std::string> FirstResultNames(const std::vector<Node*>& nodes) {
  std::vector<std::string> names;
  for (const Node* node : nodes) names.push_back(node->result(0)->name());
  return names;
}

TEST(GraphUtilsTest, TopologicalOrderKeepsAValidProgramOrder) {
  auto module = ParseModule(kDiamond);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("g");
  EXPECT_EQ(FirstResultNames(*TopologicalOrder(*graph)), (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(GraphUtilsTest, SortTopologicallyRepairsAnInvalidOrder) {
  auto module = ParseModule(kDiamond);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("g");
  graph->MoveBefore(graph->FindValue("d")->producer(), graph->FindValue("a")->producer());
  graph->MoveBefore(graph->FindValue("c")->producer(), graph->FindValue("d")->producer());
  EXPECT_FALSE(VerifyModule(**module).ok());
  ASSERT_TRUE(SortTopologically(*graph).ok());
  EXPECT_EQ(FirstResultNames(graph->nodes()), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(VerifyModule(**module).ok());
}

TEST(GraphUtilsTest, DetectsCycles) {
  auto module = ParseModule(kDiamond);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("g");
  Node* a = graph->FindValue("a")->producer();
  a->ReplaceOperand(0, graph->FindValue("c"));  // a -> c -> a
  auto order = TopologicalOrder(*graph);
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(order.status().message(), "graph @g has a cycle through aten::relu defining %a at line 4:10");
}

TEST(GraphUtilsTest, CloneModulePrintsTheSame) {
  auto module = ParseModule(testing::kFsdpMlpStepText);
  ASSERT_TRUE(module.ok());
  std::unique_ptr<Module> copy = CloneModule(**module);
  EXPECT_EQ(PrintModule(*copy), PrintModule(**module));
  EXPECT_TRUE(VerifyModule(*copy).ok());
  // The copy is independent.
  Graph* copied = copy->FindGraph("train_step");
  copied->FindValue("h")->producer()->mutable_annotations().stream = 9;
  EXPECT_EQ((*module)->FindGraph("train_step")->FindValue("h")->producer()->annotations().stream, -1);
}

TEST(GraphUtilsTest, ExtractSubgraphCutsAtTheBoundary) {
  auto module = ParseModule(kDiamond);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("g");
  std::vector<Node*> middle = {graph->FindValue("c")->producer(), graph->FindValue("b")->producer()};
  auto sub = ExtractSubgraph(*graph, middle, "middle");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(PrintGraph(**sub),
            "  graph @middle {\n"
            "    input %x: f32[4]\n"
            "    input %a: f32[4]\n"
            "    %b = aten::neg(%x) : f32[4]\n"
            "    %c = aten::add.Tensor(%a, %b) : f32[4]\n"
            "    output c = %c\n"
            "  }\n");
  EXPECT_TRUE(VerifyGraph(**sub, nullptr).ok());

  Graph other("other");
  Value* y = other.AddInput("y", Type::Tensor({DType::kFloat32, {1}}));
  Node* foreign = other.AddNode("aten::relu", {NodeArg(y)}, {Type::Tensor({DType::kFloat32, {1}})});
  auto bad = ExtractSubgraph(*graph, {foreign}, "bad");
  EXPECT_EQ(bad.status().message(), "aten::relu defining %0 is not in graph @g");
}

}  // namespace
}  // namespace magi
