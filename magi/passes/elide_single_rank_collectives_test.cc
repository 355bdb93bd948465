#include "magi/passes/elide_single_rank_collectives.h"

#include "gtest/gtest.h"
#include "magi/passes/pass_test_util.h"

namespace magi {
namespace {

std::string Elide(absl::string_view input, bool expect_changed) {
  return testing::RunPassOnText("elide-single-rank-collectives", input, expect_changed);
}

// Every kind over a group of one rank: the readers of the waits read the inputs.
TEST(ElideSingleRankCollectivesTest, EveryKindOverOneRankIsTheIdentity) {
  EXPECT_EQ(Elide(R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %w.shard: f32[8,4] {role = param}
    input %b.shard: f32[4] {role = param}
    input %x: f32[2,4]
    %f0, %f1 = magi::all_gather_start([%w.shard, %b.shard], group = "dp") : future<f32[8,4]>, future<f32[4]>
    %w, %b = magi::wait(%f0, %f1) : f32[8,4], f32[4]
    %t = aten::t(%w) : f32[4,8]strides[1,4]
    %y = aten::mm(%x, %t) : f32[2,8]
    %g = aten::mul.Tensor(%y, %y) : f32[2,8]
    %f2 = magi::reduce_scatter_start([%g], group = "dp", reduce_op = "avg") : future<f32[2,8]>
    %gs = magi::wait(%f2) : f32[2,8]
    %f3 = magi::all_reduce_start([%gs], group = "dp", reduce_op = "max") : future<f32[2,8]>
    %m = magi::wait(%f3) : f32[2,8]
    %f4 = magi::all_to_all_start([%m], group = "dp") : future<f32[2,8]>
    %a = magi::wait(%f4) : f32[2,8]
    %z = aten::add.Tensor(%a, %b, alpha = 1) : f32[2,8]
    output z = %z
  }
}
)",
                  /*expect_changed=*/true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %w.shard: f32[8,4] {role = param}
    input %b.shard: f32[4] {role = param}
    input %x: f32[2,4]
    %t = aten::t(%w.shard) : f32[4,8]strides[1,4]
    %y = aten::mm(%x, %t) : f32[2,8]
    %g = aten::mul.Tensor(%y, %y) : f32[2,8]
    %z = aten::add.Tensor(%g, %b.shard, alpha = 1) : f32[2,8]
    output z = %z
  }
}
)");
}

TEST(ElideSingleRankCollectivesTest, GroupsOfMoreRanksStay) {
  constexpr absl::string_view kTwoRanks = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %w.shard: f32[4,4] {role = param}
    %f0 = magi::all_gather_start([%w.shard], group = "dp") : future<f32[8,4]>
    %w = magi::wait(%f0) : f32[8,4]
    %y = aten::relu(%w) : f32[8,4]
    output y = %y
  }
}
)";
  EXPECT_EQ(Elide(kTwoRanks, /*expect_changed=*/false), kTwoRanks);
}

// Only the collective over the one-rank group goes; the other group's stays.
TEST(ElideSingleRankCollectivesTest, OnlyTheOneRankGroupOfSeveral) {
  EXPECT_EQ(Elide(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  process_group @tp {axis = "tp", size = 1}
  graph @g {
    input %x: f32[4]
    %f0 = magi::all_reduce_start([%x], group = "tp", reduce_op = "sum") : future<f32[4]>
    %a = magi::wait(%f0) : f32[4]
    %f1 = magi::all_reduce_start([%a], group = "dp", reduce_op = "sum") : future<f32[4]>
    %b = magi::wait(%f1) : f32[4]
    %y = aten::relu(%b) : f32[4]
    output y = %y
  }
}
)",
                  /*expect_changed=*/true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  process_group @tp {axis = "tp", size = 1}
  graph @g {
    input %x: f32[4]
    %f1 = magi::all_reduce_start([%x], group = "dp", reduce_op = "sum") : future<f32[4]>
    %b = magi::wait(%f1) : f32[4]
    %y = aten::relu(%b) : f32[4]
    output y = %y
  }
}
)");
}

// An output that would alias a graph input keeps its collective (a runtime's own copy).
TEST(ElideSingleRankCollectivesTest, AnOutputDoesNotStartAliasingAnInput) {
  constexpr absl::string_view kOutput = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %grad: f32[4]
    %f0 = magi::reduce_scatter_start([%grad], group = "dp", reduce_op = "sum") : future<f32[4]>
    %g = magi::wait(%f0) : f32[4]
    output g = %g
  }
}
)";
  EXPECT_EQ(Elide(kOutput, /*expect_changed=*/false), kOutput);
}

}  // namespace
}  // namespace magi
