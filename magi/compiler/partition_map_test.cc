#include "magi/compiler/partition_map.h"

#include "gtest/gtest.h"
#include "magi/compiler/partitioner.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// Two layers' elementwise runs around an all-gather; the second run crosses from layer 0
// into layer 1 and from the forward into the backward.
constexpr char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[8,16]
    input %w.shard: f32[8,16] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[16,16]>
    %a = aten::add.Tensor(%x, %x, alpha = 1) : f32[8,16] {module = "layers.0", phase = fwd}
    %b = aten::mul.Tensor(%a, %x) : f32[8,16] {module = "layers.0", phase = fwd}
    %w = magi::wait(%f) : f32[16,16]
    %c = aten::mm(%b, %w) : f32[8,16] {module = "layers.0", phase = fwd}
    %d = aten::relu(%c) : f32[8,16] {module = "layers.0", phase = fwd}
    %e = aten::add.Tensor(%d, %c, alpha = 1) : f32[8,16] {module = "layers.1", phase = fwd}
    %g = aten::mul.Tensor(%e, %e) : f32[8,16] {module = "layers.1", phase = bwd}
    output y = %g
  }
}
)";

std::unique_ptr<Module> Partitioned() {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  EXPECT_TRUE(module.ok()) << module.status();
  Graph& step = *(*module)->FindGraph("step");
  Capability capability;
  for (const Node* node : step.nodes()) {
    if (node->op() == "aten::mm") capability.unsupported.emplace_back(node, "not elementwise");
  }
  EXPECT_TRUE(OutlinePartitions(**module, step, "ew", capability).ok());
  return *std::move(module);
}

TEST(PartitionMapTest, ClustersPerPartitionWithOriginAndBackend) {
  std::unique_ptr<Module> module = Partitioned();
  std::string dot = PartitionMapDot(*module, *module->FindGraph("step"), /*compact=*/false);
  EXPECT_NE(dot.find("label=\"@step.ew.0  (ew, 2 nodes)\\nlayers.0 fwd\";"), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"@step.ew.1  (ew, 3 nodes)\\nlayers.0 fwd  ->  layers.1 bwd\";"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("shape=hexagon"), std::string::npos);  // the all-gather stays with the primary
  EXPECT_NE(dot.find("label=\"mm\\nlayers.0\""), std::string::npos) << dot;
  // mm reads the first partition's mul and the wait; relu inside the second reads mm.
  EXPECT_NE(dot.find("label=\"relu\""), std::string::npos);
  EXPECT_EQ(dot.find("cluster_", dot.find("cluster_", dot.find("cluster_") + 1) + 1), std::string::npos);
}

TEST(PartitionMapTest, CompactBoxesCountOps) {
  std::unique_ptr<Module> module = Partitioned();
  std::string dot = PartitionMapDot(*module, *module->FindGraph("step"), /*compact=*/true);
  EXPECT_NE(dot.find("label=\"1 x add.Tensor\\l1 x mul.Tensor\\l1 x relu\\l\""), std::string::npos) << dot;
}

}  // namespace
}  // namespace magi
