#include "magi/compiler/partitioner.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

// Accepts the ops named in `ops`, declines the rest (what a partition backend's
// GetCapability returns).
Capability Accepting(const Graph& graph, const std::vector<std::string>& ops) {
  Capability capability;
  for (const Node* node : graph.nodes()) {
    if (std::find(ops.begin(), ops.end(), node->op()) == ops.end()) {
      capability.unsupported.emplace_back(node, "not elementwise");
    }
  }
  return capability;
}

constexpr char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[8,16]
    input %w.shard: f32[8,16] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[16,16]>
    %a = aten::add.Tensor(%x, %x) : f32[8,16]
    %b = aten::mul.Tensor(%a, %x) : f32[8,16]
    %w = magi::wait(%f) : f32[16,16]
    %c = aten::mm(%b, %w) : f32[8,16]
    %d = aten::relu(%c) : f32[8,16]
    %e = aten::add.Tensor(%d, %c) : f32[8,16]
    %g = aten::mul.Tensor(%e, %e) : f32[8,16]
    output y = %g
    output a = %a
  }
}
)";

TEST(PartitionerTest, OutlinesRunsBetweenCollectivesAndDeclinedNodes) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& step = *(*module)->FindGraph("step");
  absl::StatusOr<std::vector<Partition>> parts =
      OutlinePartitions(**module, step, "ew", Accepting(step, {"aten::add.Tensor", "aten::mul.Tensor", "aten::relu"}));
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_TRUE(VerifyModule(**module).ok()) << VerifyModule(**module) << "\n" << PrintModule(**module);
  // The wait splits the first run (add, mul); mm splits the second (relu, add, mul).
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].callee, "step.ew.0");
  EXPECT_EQ((*parts)[0].num_nodes, 2);
  EXPECT_EQ((*parts)[1].num_nodes, 3);
  EXPECT_EQ(PrintModule(**module), R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[8,16]
    input %w.shard: f32[8,16] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[16,16]>
    %a.0, %b.1 = magi::call([%x], callee = "step.ew.0") : f32[8,16], f32[8,16]
    %w = magi::wait(%f) : f32[16,16]
    %c = aten::mm(%b.1, %w) : f32[8,16]
    %g.2 = magi::call([%c], callee = "step.ew.1") : f32[8,16]
    output y = %g.2
    output a = %a.0
  }
  graph @step.ew.0 {
    input %x: f32[8,16]
    %a = aten::add.Tensor(%x, %x) : f32[8,16]
    %b = aten::mul.Tensor(%a, %x) : f32[8,16]
    output a = %a
    output b = %b
  }
  graph @step.ew.1 {
    input %c: f32[8,16]
    %d = aten::relu(%c) : f32[8,16]
    %e = aten::add.Tensor(%d, %c) : f32[8,16]
    %g = aten::mul.Tensor(%e, %e) : f32[8,16]
    output g = %g
  }
}
)");
}

// A partition that fails to compile goes back into the step: the nodes are the original
// ones again (names aside), the callee graph is gone, the module verifies.
TEST(PartitionerTest, InlinePartitionUndoesOutlining) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& step = *(*module)->FindGraph("step");
  absl::StatusOr<std::vector<Partition>> parts =
      OutlinePartitions(**module, step, "ew", Accepting(step, {"aten::add.Tensor", "aten::mul.Tensor", "aten::relu"}));
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_TRUE(InlinePartition(**module, step, "step.ew.1").ok());
  ASSERT_TRUE(VerifyModule(**module).ok()) << VerifyModule(**module) << "\n" << PrintModule(**module);
  EXPECT_EQ((*module)->FindGraph("step.ew.1"), nullptr);
  EXPECT_EQ(PrintGraph(step), R"(  graph @step {
    input %x: f32[8,16]
    input %w.shard: f32[8,16] {role = param}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[16,16]>
    %a.0, %b.1 = magi::call([%x], callee = "step.ew.0") : f32[8,16], f32[8,16]
    %w = magi::wait(%f) : f32[16,16]
    %c = aten::mm(%b.1, %w) : f32[8,16]
    %d = aten::relu(%c) : f32[8,16]
    %e = aten::add.Tensor(%d, %c) : f32[8,16]
    %g = aten::mul.Tensor(%e, %e) : f32[8,16]
    output y = %g
    output a = %a.0
  }
)");
  EXPECT_EQ(InlinePartition(**module, step, "step.ew.1").code(), absl::StatusCode::kNotFound);
}

TEST(PartitionerTest, SizeBoundsAndIdenticalPartitionsShareAKey) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @step {
    input %x: f32[4]
    %a = aten::add.Tensor(%x, %x) : f32[4]
    %b = aten::mul.Tensor(%a, %a) : f32[4]
    %c = aten::sin(%b) : f32[4]
    %d = aten::add.Tensor(%c, %c) : f32[4]
    %e = aten::mul.Tensor(%d, %d) : f32[4]
    %f = aten::sin(%e) : f32[4]
    %g = aten::add.Tensor(%f, %f) : f32[4]
    output y = %g
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& step = *(*module)->FindGraph("step");
  Capability capability = Accepting(step, {"aten::add.Tensor", "aten::mul.Tensor"});
  // Runs of one node (the last add) stay put with min_nodes = 2.
  absl::StatusOr<std::vector<Partition>> parts = OutlinePartitions(**module, step, "ew", capability, 2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].structural_key, (*parts)[1].structural_key);
  EXPECT_EQ(step.num_nodes(), 5);  // call, sin, call, sin, add
  ASSERT_TRUE(VerifyModule(**module).ok());

  absl::StatusOr<std::unique_ptr<Module>> again = ParseModule(PrintModule(**module));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintModule(**again), PrintModule(**module));

  EXPECT_EQ(OutlinePartitions(**module, step, "ew", capability, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A partition that takes a donated input's update (the backend writes it in place) returns
// it as an output aliasing its own input, and its key says so: the same nodes without the
// donation are another partition.
TEST(PartitionerTest, DonatedUpdatesAliasThePartitionInput) {
  auto step_of = [](bool donate) {
    return std::string(R"(module @m {
  graph @step {
    input %cache: f32[2,8]
    input %rows: i64[2]
    input %v: f32[2,8]
    %k = aten::mul.Tensor(%v, %v) : f32[2,8]
    %new = aten::index_put(%cache, [%rows], %k, false) : f32[2,8]
    %s = aten::relu(%new) : f32[2,8]
    output s = %s
    output cache = %new)") + (donate ? " {aliases = %cache}" : "") + "\n  }\n}\n";
  };
  std::string keys[2];
  for (bool donate : {false, true}) {
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(step_of(donate));
    ASSERT_TRUE(module.ok()) << module.status();
    Graph& step = *(*module)->FindGraph("step");
    absl::StatusOr<std::vector<Partition>> parts =
        OutlinePartitions(**module, step, "ew", Accepting(step, {"aten::mul.Tensor", "aten::index_put", "aten::relu"}));
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 1u);
    const Graph& callee = *(*module)->FindGraph((*parts)[0].callee);
    ASSERT_EQ(callee.outputs().size(), 2u);
    const GraphOutput& updated = callee.outputs()[0];  // %new, then %s; inputs %v, %cache, %rows
    EXPECT_EQ(updated.name, "new");
    EXPECT_EQ(updated.aliases, donate ? callee.inputs()[1] : nullptr) << PrintModule(**module);
    EXPECT_EQ(callee.inputs()[1]->name(), "cache");
    EXPECT_TRUE(VerifyModule(**module).ok()) << VerifyModule(**module);
    keys[donate] = (*parts)[0].structural_key;
  }
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_EQ(keys[1].substr(keys[0].size()), "alias 0->1;");
}

TEST(PartitionerTest, MaxNodesSplitsLongRuns) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @step {
    input %x: f32[4]
    %a = aten::add.Tensor(%x, %x) : f32[4]
    %b = aten::mul.Tensor(%a, %a) : f32[4]
    %c = aten::add.Tensor(%b, %b) : f32[4]
    %d = aten::mul.Tensor(%c, %a) : f32[4]
    %e = aten::add.Tensor(%d, %d) : f32[4]
    output y = %e
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  Graph& step = *(*module)->FindGraph("step");
  absl::StatusOr<std::vector<Partition>> parts = OutlinePartitions(
      **module, step, "ew", Accepting(step, {"aten::add.Tensor", "aten::mul.Tensor"}), /*min_nodes=*/1,
      /*max_nodes=*/2);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[2].num_nodes, 1);
  ASSERT_TRUE(VerifyModule(**module).ok()) << PrintModule(**module);
}

}  // namespace
}  // namespace magi
