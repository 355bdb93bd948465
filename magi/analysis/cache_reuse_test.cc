#include "magi/analysis/cache_reuse.h"

#include "gtest/gtest.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// Every tensor is 1 KiB. neg touches 2 KiB (x read, a written), the view nothing, exp
// 2 KiB, each mul 3 KiB.
constexpr char kStep[] = R"(module @m {
  graph @g {
    input %x: f32[256]
    input %w: f32[16,16]
    %a = aten::neg(%x) : f32[256]
    %v = aten::view(%a, [16, 16]) : f32[16,16]
    %b = aten::exp(%w) : f32[16,16]
    %c = aten::mul.Tensor(%v, %b) : f32[16,16]
    %d = aten::mul.Tensor(%c, %w) : f32[16,16]
    output d = %d
  }
}
)";

TEST(OperandCacheModelTest, AnOperandIsInCacheWhenLittleWasTouchedSinceItsStorageWasWritten) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  OperandCacheModel model(g);
  const Node& mul = *g.FindValue("c")->producer();
  // v is a view of a: its storage was written by neg, 4 KiB of traffic before mul (neg's
  // 2 KiB, exp's 2 KiB); b by exp, 2 KiB before.
  EXPECT_EQ(model.OperandsInCache(mul, 4096), (std::vector<bool>{true, true}));
  EXPECT_EQ(model.OperandsInCache(mul, 4095), (std::vector<bool>{false, true}));
  EXPECT_EQ(model.OperandsInCache(mul, 2047), (std::vector<bool>{false, false}));
  // A graph input is cold however small the traffic since: the previous step touched it.
  const Node& last = *g.FindValue("d")->producer();
  EXPECT_EQ(model.OperandsInCache(last, int64_t{1} << 40), (std::vector<bool>{true, false}));
  EXPECT_EQ(model.BytesTouchedBefore(0), 0);
  EXPECT_EQ(model.BytesTouchedBefore(2), 2048);  // the view moves nothing
  EXPECT_EQ(model.BytesTouchedBefore(5), 2048 + 2048 + 3072 + 3072);
}

TEST(OperandCacheModelTest, NonTensorOperandsAreSkippedAndOtherGraphsAreCold) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %w: f32[8]
    %f = magi::all_gather_start([%w], group = "dp") : future<f32[16]>
    %full = magi::wait(%f) : f32[16]
    %h = aten::neg(%full) : f32[16]
    output h = %h
  }
  graph @other {
    input %y: f32[4]
    %z = aten::neg(%y) : f32[4]
    output z = %z
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  OperandCacheModel model(g);
  // The wait's operand is a future: no entry. What it received is warm for neg.
  EXPECT_TRUE(model.OperandsInCache(*g.FindValue("full")->producer(), 1 << 20).empty());
  EXPECT_EQ(model.OperandsInCache(*g.FindValue("h")->producer(), 1 << 20), (std::vector<bool>{true}));
  const Graph& other = *(*module)->FindGraph("other");
  const Node& foreign = *other.FindValue("z")->producer();
  EXPECT_EQ(model.OperandsInCache(foreign, 1 << 20), (std::vector<bool>{false}));
}

}  // namespace
}  // namespace magi
