#include "magi/passes/hoist_weight_preparation.h"

#include <string>

#include "gtest/gtest.h"
#include "magi/passes/pass_test_util.h"

namespace magi {
namespace {

// concat-matmuls' output at world 2: the concatenation reads only parameter shards and
// moves to @g.prep; the step reads it as an input of its name and no longer reads the
// parts' shards; the norm weight, still gathered by the step, stays.
TEST(HoistWeightPreparationTest, ConcatenationMovesToThePreparationGraph) {
  EXPECT_EQ(testing::RunPassOnText("hoist-weight-preparation", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[3,8]
    input %norm.shard: f32[4] {role = param}
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[2,8] {role = param}
    %wq.shard.concat = aten::cat([%wq.shard, %wk.shard], 0) : f32[6,8]
    %0, %1 = magi::all_gather_start([%norm.shard, %wq.shard.concat], group = "dp") : future<f32[8]>, future<f32[12,8]>
    %2, %3 = magi::wait(%0, %1) : f32[8], f32[12,8]
    %h = aten::mul.Tensor(%x, %2) : f32[3,8]
    %4 = aten::t(%3) : f32[8,12]strides[1,8]
    %5 = aten::mm(%h, %4) : f32[3,12]
    output y = %5
  }
}
)",
                                    /*expect_changed=*/true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[3,8]
    input %norm.shard: f32[4] {role = param}
    input %wq.shard.concat: f32[6,8] {role = param}
    %0, %1 = magi::all_gather_start([%norm.shard, %wq.shard.concat], group = "dp") : future<f32[8]>, future<f32[12,8]>
    %2, %3 = magi::wait(%0, %1) : f32[8], f32[12,8]
    %h = aten::mul.Tensor(%x, %2) : f32[3,8]
    %4 = aten::t(%3) : f32[8,12]strides[1,8]
    %5 = aten::mm(%h, %4) : f32[3,12]
    output y = %5
  }
  graph @g.prep {
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[2,8] {role = param}
    %wq.shard.concat = aten::cat([%wq.shard, %wk.shard], 0) : f32[6,8]
    output wq.shard.concat = %wq.shard.concat
  }
}
)");
}

// Chains of weight-only work move whole (a view between two computations included); a
// view the step reads stays in the step; a buffer the step updates, data, randomness and
// communication are never weight preparation; a parameter the step still reads stays
// its input.
TEST(HoistWeightPreparationTest, WhatMovesAndWhatStays) {
  EXPECT_EQ(testing::RunPassOnText("hoist-weight-preparation", R"(module @m {
  graph @g {
    input %x: f32[4]
    input %w: f32[4] {role = param}
    input %b: f32[4] {role = buffer}
    input %stats: f32[4] {role = buffer}
    %a = aten::mul.Tensor(%w, %b) : f32[4]
    %v = aten::view(%a, [2, 2]) : f32[2,2]
    %c = aten::neg(%v) : f32[2,2]
    %wv = aten::view(%w, [2, 2]) : f32[2,2]
    %s = aten::add.Tensor(%stats, %w, alpha = 1) : f32[4]
    %r = aten::rand_like(%w) : f32[4]
    %y = aten::mul.Tensor(%x, %a) : f32[4]
    %z = aten::mul.Tensor(%x, %w) : f32[4]
    output y = %y
    output z = %z
    output c = %c
    output wv = %wv
    output r = %r
    output stats.updated = %s
  }
}
)",
                                    /*expect_changed=*/true),
            R"(module @m {
  graph @g {
    input %x: f32[4]
    input %w: f32[4] {role = param}
    input %stats: f32[4] {role = buffer}
    input %a: f32[4] {role = param}
    input %c: f32[2,2] {role = param}
    %wv = aten::view(%w, [2, 2]) : f32[2,2]
    %s = aten::add.Tensor(%stats, %w, alpha = 1) : f32[4]
    %r = aten::rand_like(%w) : f32[4]
    %y = aten::mul.Tensor(%x, %a) : f32[4]
    %z = aten::mul.Tensor(%x, %w) : f32[4]
    output y = %y
    output z = %z
    output c = %c
    output wv = %wv
    output r = %r
    output stats.updated = %s
  }
  graph @g.prep {
    input %w: f32[4] {role = param}
    input %b: f32[4] {role = buffer}
    %a = aten::mul.Tensor(%w, %b) : f32[4]
    %v = aten::view(%a, [2, 2]) : f32[2,2]
    %c = aten::neg(%v) : f32[2,2]
    output a = %a
    output c = %c
  }
}
)");
}

// Nothing but views of weights, or work on data: nothing to hoist, no graph added; a
// training step's parameters (outputs of the step) are not weights.
TEST(HoistWeightPreparationTest, NothingToHoist) {
  testing::RunPassOnText("hoist-weight-preparation", R"(module @m {
  graph @g {
    input %x: f32[4]
    input %w: f32[4] {role = param}
    %v = aten::view(%w, [2, 2]) : f32[2,2]
    %y = aten::mul.Tensor(%x, %w) : f32[4]
    output y = %y
    output v = %v
  }
}
)",
                         /*expect_changed=*/false);
  testing::RunPassOnText("hoist-weight-preparation", R"(module @m {
  graph @g {
    input %x: f32[4]
    input %w: f32[4] {role = param}
    %n = aten::neg(%w) : f32[4]
    %y = aten::mul.Tensor(%x, %n) : f32[4]
    %w2 = aten::sub.Tensor(%w, %y, alpha = 1) : f32[4]
    output y = %y
    output w = %w2
  }
}
)",
                         /*expect_changed=*/false);
}

}  // namespace
}  // namespace magi
