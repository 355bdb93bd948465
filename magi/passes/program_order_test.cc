#include "magi/passes/program_order.h"

#include "gtest/gtest.h"
#include "magi/ir/collectives.h"
#include "magi/ir/printer.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/schedule_util.h"

namespace magi {
namespace {

using testing::LoadTestdata;

std::vector<std::string> Names(const std::vector<Node*>& nodes) {
  std::vector<std::string> names;
  for (const Node* node : nodes) names.push_back(node->num_results() > 0 ? node->result(0)->name() : node->op());
  return names;
}

TEST(ProgramOrderTest, MovesUpdatePositionsAndApplyReordersTheGraph) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  Graph& graph = *module->graphs()[0];
  ProgramOrder order(graph);
  std::vector<Node*> nodes = graph.nodes();
  ASSERT_EQ(order.size(), static_cast<int>(nodes.size()));
  Node* last = nodes.back();
  order.MoveBefore(last, nodes[0]);  // a later node to the front (it moves; nothing checks validity here)
  EXPECT_EQ(order.Position(last), 0);
  EXPECT_EQ(order.Position(nodes[0]), 1);
  order.MoveBefore(last, nullptr);  // and back to the end
  EXPECT_EQ(order.Position(last), order.size() - 1);
  order.MoveBefore(nodes[3], nodes[10]);  // later: lands right before nodes[10]
  EXPECT_EQ(order.Position(nodes[3]), 9);
  EXPECT_EQ(order.Position(nodes[10]), 10);
  EXPECT_EQ(order.Position(nodes[4]), 3);
  for (int i = 0; i < order.size(); ++i) EXPECT_EQ(order.Position(order.at(i)), i);
  order.Apply(graph);
  EXPECT_EQ(Names(graph.nodes()), Names(order.nodes()));
}

// ProgramOrder::HoistBefore makes exactly the moves schedule_util's HoistBefore makes.
TEST(ProgramOrderTest, HoistBeforeMatchesTheGraphVersion) {
  auto a = LoadTestdata("llama4_fsdp_step.mir");
  auto b = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Graph& graph_a = *a->graphs()[0];
  Graph& graph_b = *b->graphs()[0];
  ProgramOrder order(graph_b);
  std::vector<Node*> nodes_a = graph_a.nodes(), nodes_b = graph_b.nodes();
  int hoisted = 0;
  // Every all-gather start to the top, and to right after the previous wait.
  for (size_t i = 0; i < nodes_a.size(); ++i) {
    if (nodes_a[i]->op() != kAllGatherStartOp) continue;
    for (size_t target : {size_t{0}, i / 2}) {
      Node* before_a = graph_a.nodes()[target];
      Node* before_b = order.at(static_cast<int>(target));
      bool moved_a = HoistBefore(graph_a, nodes_a[i], before_a);
      bool moved_b = order.HoistBefore(nodes_b[i], before_b);
      EXPECT_EQ(moved_a, moved_b) << i;
      hoisted += moved_a;
      EXPECT_EQ(Names(graph_a.nodes()), Names(order.nodes())) << i;
    }
  }
  EXPECT_GT(hoisted, 5);
  order.Apply(graph_b);
  EXPECT_EQ(PrintModule(*a), PrintModule(*b));
}

}  // namespace
}  // namespace magi
