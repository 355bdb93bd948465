#include "magi/passes/concat_matmuls.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/passes/pass_test_util.h"

namespace magi {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// q/k/v-like linears of one layer at world 2: the gathered weights are one all-gather's
// (with a norm weight that is no part); each mm reads its own _reshape_alias of %h.
constexpr char kWorld2[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[3,8]
    input %norm.shard: f32[4] {role = param}
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[2,8] {role = param}
    %f0, %f1, %f2 = magi::all_gather_start([%norm.shard, %wq.shard, %wk.shard], group = "dp") : future<f32[8]>, future<f32[8,8]>, future<f32[4,8]> {module = "layers.0"}
    %norm, %wq, %wk = magi::wait(%f0, %f1, %f2) : f32[8], f32[8,8], f32[4,8] {module = "layers.0"}
    %h = aten::mul.Tensor(%x, %norm) : f32[3,8]
    %tq = aten::t(%wq) : f32[8,8]strides[1,8] {module = "layers.0.attention.wq"}
    %aq = aten::_reshape_alias(%h, [3, 8], [8, 1]) : f32[3,8] {module = "layers.0.attention.wq"}
    %q = aten::mm(%aq, %tq) : f32[3,8] {module = "layers.0.attention.wq"}
    %tk = aten::t(%wk) : f32[8,4]strides[1,8] {module = "layers.0.attention.wk"}
    %ak = aten::_reshape_alias(%h, [3, 8], [8, 1]) : f32[3,8] {module = "layers.0.attention.wk"}
    %k = aten::mm(%ak, %tk) : f32[3,4] {module = "layers.0.attention.wk"}
    %r = aten::relu(%k) : f32[3,4]
    output q = %q
    output r = %r
  }
}
)";

TEST(ConcatMatmulsTest, WorldTwoGatheredPartsBecomeOneGatherAndOneMatmul) {
  EXPECT_EQ(testing::RunPassOnText("concat-matmuls", kWorld2, /*expect_changed=*/true), R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[3,8]
    input %norm.shard: f32[4] {role = param}
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[2,8] {role = param}
    %wq.shard.concat = aten::cat([%wq.shard, %wk.shard], 0) : f32[6,8] {module = "layers.0.attention"}
    %0, %1 = magi::all_gather_start([%norm.shard, %wq.shard.concat], group = "dp") : future<f32[8]>, future<f32[12,8]> {module = "layers.0"}
    %2, %3 = magi::wait(%0, %1) : f32[8], f32[12,8] {module = "layers.0"}
    %h = aten::mul.Tensor(%x, %2) : f32[3,8]
    %aq = aten::_reshape_alias(%h, [3, 8], [8, 1]) : f32[3,8] {module = "layers.0.attention.wq"}
    %4 = aten::t(%3) : f32[8,12]strides[1,8] {module = "layers.0.attention"}
    %5 = aten::mm(%aq, %4) : f32[3,12] {module = "layers.0.attention"}
    %6 = aten::view(%5, [3, 2, 6]) : f32[3,2,6] {module = "layers.0.attention"}
    %7 = aten::slice.Tensor(%6, 2, 0, 4, 1) : f32[3,2,4]strides[12,6,1] {module = "layers.0.attention.wq"}
    %8 = aten::clone(%7, memory_format = 0) : f32[3,2,4] {module = "layers.0.attention.wq"}
    %9 = aten::view(%8, [3, 8]) : f32[3,8] {module = "layers.0.attention.wq"}
    %10 = aten::slice.Tensor(%6, 2, 4, 6, 1) : f32[3,2,2]strides[12,6,1] {module = "layers.0.attention.wk"}
    %11 = aten::clone(%10, memory_format = 0) : f32[3,2,2] {module = "layers.0.attention.wk"}
    %12 = aten::view(%11, [3, 4]) : f32[3,4] {module = "layers.0.attention.wk"}
    %r = aten::relu(%12) : f32[3,4]
    output q = %9
    output r = %r
  }
}
)");
}

// World 1 (the gather is over one rank) and three parts, as q/k/v: columns sliced off
// the one matmul, no interleaving.
TEST(ConcatMatmulsTest, WorldOneThreePartsAreSlicedByColumns) {
  const std::string world1 = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %h: f32[2,8]
    input %wq.shard: f32[8,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    input %wv.shard: f32[4,8] {role = param}
    %f0, %f1, %f2 = magi::all_gather_start([%wq.shard, %wk.shard, %wv.shard], group = "dp") : future<f32[8,8]>, future<f32[4,8]>, future<f32[4,8]>
    %wq, %wk, %wv = magi::wait(%f0, %f1, %f2) : f32[8,8], f32[4,8], f32[4,8]
    %tq = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%h, %tq) : f32[2,8]
    %tk = aten::t(%wk) : f32[8,4]strides[1,8]
    %k = aten::mm(%h, %tk) : f32[2,4]
    %tv = aten::t(%wv) : f32[8,4]strides[1,8]
    %v = aten::mm(%h, %tv) : f32[2,4]
    output q = %q
    output k = %k
    output v = %v
  }
}
)";
  EXPECT_EQ(testing::RunPassOnText("concat-matmuls", world1, /*expect_changed=*/true), R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %h: f32[2,8]
    input %wq.shard: f32[8,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    input %wv.shard: f32[4,8] {role = param}
    %wq.shard.concat = aten::cat([%wq.shard, %wk.shard, %wv.shard], 0) : f32[16,8]
    %0 = magi::all_gather_start([%wq.shard.concat], group = "dp") : future<f32[16,8]>
    %1 = magi::wait(%0) : f32[16,8]
    %2 = aten::t(%1) : f32[8,16]strides[1,8]
    %3 = aten::mm(%h, %2) : f32[2,16]
    %4 = aten::slice.Tensor(%3, 1, 0, 8, 1) : f32[2,8]strides[16,1]
    %5 = aten::clone(%4, memory_format = 0) : f32[2,8]
    %6 = aten::slice.Tensor(%3, 1, 8, 12, 1) : f32[2,4]strides[16,1]
    %7 = aten::clone(%6, memory_format = 0) : f32[2,4]
    %8 = aten::slice.Tensor(%3, 1, 12, 16, 1) : f32[2,4]strides[16,1]
    %9 = aten::clone(%8, memory_format = 0) : f32[2,4]
    output q = %5
    output k = %7
    output v = %9
  }
}
)");
}

// Mixed precision: each fp32 shard is cast to bf16 before the gather; the concatenation
// is of the fp32 shards, cast once.
TEST(ConcatMatmulsTest, CastShardsAreConcatenatedThenCastOnce) {
  const std::string out = testing::RunPassOnText("concat-matmuls", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: bf16[2,8]
    input %w1.shard: f32[3,8] {role = param}
    input %w3.shard: f32[3,8] {role = param}
    %c1 = aten::_to_copy(%w1.shard, dtype = dtype(bf16), layout = none) : bf16[3,8]
    %c3 = aten::_to_copy(%w3.shard, dtype = dtype(bf16), layout = none) : bf16[3,8]
    %f0, %f1 = magi::all_gather_start([%c1, %c3], group = "dp") : future<bf16[6,8]>, future<bf16[6,8]>
    %w1, %w3 = magi::wait(%f0, %f1) : bf16[6,8], bf16[6,8]
    %t1 = aten::t(%w1) : bf16[8,6]strides[1,8]
    %a = aten::mm(%h, %t1) : bf16[2,6]
    %t3 = aten::t(%w3) : bf16[8,6]strides[1,8]
    %b = aten::mm(%h, %t3) : bf16[2,6]
    output a = %a
    output b = %b
  }
}
)",
                                                 /*expect_changed=*/true);
  EXPECT_NE(out.find("    %w1.shard.concat.f32 = aten::cat([%w1.shard, %w3.shard], 0) : f32[6,8]\n"
                     "    %w1.shard.concat = aten::_to_copy(%w1.shard.concat.f32, dtype = dtype(bf16), layout = none) "
                     ": bf16[6,8]\n"
                     "    %0 = magi::all_gather_start([%w1.shard.concat], group = \"dp\") : future<bf16[12,8]>\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(Count(out, "aten::_to_copy("), 1) << out;
  EXPECT_EQ(Count(out, "aten::mm("), 1) << out;
  // Casts to different dtypes are no group.
  testing::RunPassOnText("concat-matmuls", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: bf16[2,8]
    input %w1.shard: f32[3,8] {role = param}
    input %w3.shard: f32[3,8] {role = param}
    %c1 = aten::_to_copy(%w1.shard, dtype = dtype(bf16)) : bf16[3,8]
    %c3 = aten::_to_copy(%w3.shard, dtype = dtype(f16)) : f16[3,8]
    %f0, %f1 = magi::all_gather_start([%c1, %c3], group = "dp") : future<bf16[6,8]>, future<f16[6,8]>
    %w1, %w3 = magi::wait(%f0, %f1) : bf16[6,8], f16[6,8]
    %t1 = aten::t(%w1) : bf16[8,6]strides[1,8]
    %a = aten::mm(%h, %t1) : bf16[2,6]
    %t3 = aten::t(%w3) : f16[8,6]strides[1,8]
    %b = aten::mm(%h, %t3) : bf16[2,6]
    output a = %a
    output b = %b
  }
}
)",
                         /*expect_changed=*/false);
}

// Parameters read directly (a graph compiled without FSDP): the concatenation reads them.
TEST(ConcatMatmulsTest, UngatheredParameters) {
  const std::string out = testing::RunPassOnText("concat-matmuls", R"(module @m {
  graph @g {
    input %h: f32[2,8]
    input %w1: f32[6,8] {role = param}
    input %w3: f32[6,8] {role = param}
    %t1 = aten::t(%w1) : f32[8,6]strides[1,8]
    %a = aten::mm(%h, %t1) : f32[2,6]
    %t3 = aten::t(%w3) : f32[8,6]strides[1,8]
    %b = aten::mm(%h, %t3) : f32[2,6]
    %y = aten::mul.Tensor(%a, %b) : f32[2,6]
    output y = %y
  }
}
)",
                                                 /*expect_changed=*/true);
  EXPECT_NE(out.find("%w1.concat = aten::cat([%w1, %w3], 0) : f32[12,8]\n"), std::string::npos) << out;
  EXPECT_NE(out.find("= aten::mm(%h, %0) : f32[2,12]\n"), std::string::npos) << out;
  EXPECT_EQ(Count(out, "aten::mm("), 1) << out;
}

// What is not a group stays as it is: activations that differ, weights of two dtypes,
// weights of two all-gathers, one linear alone.
TEST(ConcatMatmulsTest, LeavesWhatIsNoGroup) {
  for (const char* body : {
           // different activations
           "%t1 = aten::t(%w1) : f32[8,6]strides[1,8]\n"
           "    %a = aten::mm(%h, %t1) : f32[2,6]\n"
           "    %g = aten::relu(%h) : f32[2,8]\n"
           "    %t3 = aten::t(%w3) : f32[8,6]strides[1,8]\n"
           "    %b = aten::mm(%g, %t3) : f32[2,6]",
           // views of the same activation with different arguments
           "%h1 = aten::_reshape_alias(%h, [2, 8], [8, 1]) : f32[2,8]\n"
           "    %h2 = aten::_reshape_alias(%h, [2, 8], [1, 2]) : f32[2,8]\n"
           "    %t1 = aten::t(%w1) : f32[8,6]strides[1,8]\n"
           "    %a = aten::mm(%h1, %t1) : f32[2,6]\n"
           "    %t3 = aten::t(%w3) : f32[8,6]strides[1,8]\n"
           "    %b = aten::mm(%h2, %t3) : f32[2,6]",
           // different dtypes
           "%t1 = aten::t(%w1) : f32[8,6]strides[1,8]\n"
           "    %a = aten::mm(%h, %t1) : f32[2,6]\n"
           "    %t3 = aten::t(%wb) : bf16[8,6]strides[1,8]\n"
           "    %b = aten::mm(%h, %t3) : f32[2,6]",
           // one linear
           "%t1 = aten::t(%w1) : f32[8,6]strides[1,8]\n"
           "    %a = aten::mm(%h, %t1) : f32[2,6]\n"
           "    %b = aten::relu(%a) : f32[2,6]",
       }) {
    const std::string text = absl::StrCat(
        "module @m {\n  graph @g {\n    input %h: f32[2,8]\n    input %w1: f32[6,8] {role = param}\n"
        "    input %w3: f32[6,8] {role = param}\n    input %wb: bf16[6,8] {role = param}\n    ",
        body, "\n    output a = %a\n    output b = %b\n  }\n}\n");
    testing::RunPassOnText("concat-matmuls", text, /*expect_changed=*/false);
  }
}

// A gathered weight that something else reads too stays gathered on its own (a training
// step's backward reads it again); the others of its group are still concatenated.
TEST(ConcatMatmulsTest, PartReadElsewhereStaysOutOfTheGroup) {
  const std::string out = testing::RunPassOnText("concat-matmuls", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: f32[2,8]
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    input %wv.shard: f32[4,8] {role = param}
    %f0, %f1, %f2 = magi::all_gather_start([%wq.shard, %wk.shard, %wv.shard], group = "dp") : future<f32[8,8]>, future<f32[8,8]>, future<f32[8,8]>
    %wq, %wk, %wv = magi::wait(%f0, %f1, %f2) : f32[8,8], f32[8,8], f32[8,8]
    %tq = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%h, %tq) : f32[2,8]
    %tk = aten::t(%wk) : f32[8,8]strides[1,8]
    %k = aten::mm(%h, %tk) : f32[2,8]
    %tv = aten::t(%wv) : f32[8,8]strides[1,8]
    %v = aten::mm(%h, %tv) : f32[2,8]
    %again = aten::mm(%k, %wk) : f32[2,8]
    output q = %q
    output v = %v
    output again = %again
  }
}
)",
                                                 /*expect_changed=*/true);
  EXPECT_NE(out.find("%wq.shard.concat = aten::cat([%wq.shard, %wv.shard], 0) : f32[8,8]\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("magi::all_gather_start([%wq.shard.concat, %wk.shard], group = \"dp\") : future<f32[16,8]>, "
                     "future<f32[8,8]>\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(Count(out, "aten::mm("), 3) << out;  // q+v, k, again
  // Both, or the only other part, read elsewhere: nothing to do.
  testing::RunPassOnText("concat-matmuls", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: f32[2,8]
    input %wq.shard: f32[4,8] {role = param}
    input %wk.shard: f32[4,8] {role = param}
    %f0, %f1 = magi::all_gather_start([%wq.shard, %wk.shard], group = "dp") : future<f32[8,8]>, future<f32[8,8]>
    %wq, %wk = magi::wait(%f0, %f1) : f32[8,8], f32[8,8]
    %tq = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%h, %tq) : f32[2,8]
    %tk = aten::t(%wk) : f32[8,8]strides[1,8]
    %k = aten::mm(%h, %tk) : f32[2,8]
    output q = %q
    output k = %k
    output wk = %wk
  }
}
)",
                         /*expect_changed=*/false);
}

// Rows the world size does not divide: FSDP pads the shards and slices the gathered
// tensor back, so the transpose reads a slice, not the gather: no part.
TEST(ConcatMatmulsTest, PaddedParametersAreNoParts) {
  testing::RunPassOnText("concat-matmuls", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: f32[2,8]
    input %w1.shard: f32[3,8] {role = param}
    input %w3.shard: f32[3,8] {role = param}
    %f0, %f1 = magi::all_gather_start([%w1.shard, %w3.shard], group = "dp") : future<f32[6,8]>, future<f32[6,8]>
    %g1, %g3 = magi::wait(%f0, %f1) : f32[6,8], f32[6,8]
    %w1 = aten::slice.Tensor(%g1, 0, 0, 5, 1) : f32[5,8]
    %w3 = aten::slice.Tensor(%g3, 0, 0, 5, 1) : f32[5,8]
    %t1 = aten::t(%w1) : f32[8,5]strides[1,8]
    %a = aten::mm(%h, %t1) : f32[2,5]
    %t3 = aten::t(%w3) : f32[8,5]strides[1,8]
    %b = aten::mm(%h, %t3) : f32[2,5]
    output a = %a
    output b = %b
  }
}
)",
                         /*expect_changed=*/false);
}

}  // namespace
}  // namespace magi
