#include "magi/analysis/memory_plan.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

TEST(MemoryPlanTest, PeakFollowsLifetimesAndViewsShareStorage) {
  // x: 400 B. a (400 B) is used by b and by its view v; c uses v last.
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[100]
    %a = aten::neg(%x) : f32[100]
    %v = aten::view(%a, [10, 10]) : f32[10,10]
    %b = aten::exp(%x) : f32[100]
    %c = aten::sum(%v, none) : f32[]
    %d = aten::mul.Tensor(%b, %c) : f32[100]
    output d = %d
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("g"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // After each node: a (x+a), v (no new bytes), b (x dies: a+b), c (a dies: b+c), d (b,c die: d).
  EXPECT_EQ(plan->live_after, (std::vector<int64_t>{800, 800, 800, 404, 400}));
  EXPECT_EQ(plan->peak_bytes, 1200);  // x, a and b while exp runs
  EXPECT_EQ(plan->peak_node, 2);
  // x's buffer is free after exp; a's after sum: d reuses one of them.
  const Graph& g = *(*module)->FindGraph("g");
  EXPECT_FALSE(plan->buffer_of.contains(g.FindValue("v")));  // a view has no storage of its own
  // x, a, b need three 400-byte buffers at the peak; c (4 B) and d reuse freed ones.
  EXPECT_EQ(plan->buffer_sizes, (std::vector<int64_t>{400, 400, 400}));
  EXPECT_EQ(plan->total_buffer_bytes(), 1200);
}

// Each tensor fits in int64 bytes, their sum does not: an error naming where, never a
// wrapped peak.
TEST(MemoryPlanTest, LiveBytesPastInt64AreAnError) {
  auto inputs = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[1152921504606846976]
    input %y: f32[1152921504606846976]
    output y = %y
  }
}
)");
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*inputs)->FindGraph("g"));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(plan.status().message(),
            "graph @g: the bytes live at the start (graph inputs) add up to more than int64 can hold "
            "(9223372036854775807)");
  auto node = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[1152921504606846976]
    %y = aten::neg(%x) : f32[1152921504606846976]
    %z = aten::neg(%y) : f32[1152921504606846976]
    output z = %z
  }
}
)");
  ASSERT_TRUE(node.ok()) << node.status();
  plan = PlanMemory(*(*node)->FindGraph("g"));
  EXPECT_EQ(plan.status().message(),
            "graph @g: the bytes live at aten::neg defining %y at line 4:10 add up to more than int64 can hold "
            "(9223372036854775807)");
}

TEST(MemoryPlanTest, DynamicSizesAreAnError) {
  auto module = ParseModule("module @m { graph @g { input %x: f32[?] } }");
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(PlanMemory(*(*module)->FindGraph("g")).status().message(), "%x has a dynamic size");
}

}  // namespace
}  // namespace magi
