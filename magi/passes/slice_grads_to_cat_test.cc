#include "magi/passes/slice_grads_to_cat.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/passes/pass_test_util.h"

namespace magi {
namespace {

// RoPE's rotate_half backward as captured (tests/ and the Llama step): two zero-padded
// halves added; either operand order; a negative dim.
TEST(SliceGradsToCatTest, TwoHalvesAddedBecomeOneCat) {
  EXPECT_EQ(testing::RunPassOnText("slice-grads-to-cat", R"(module @m {
  graph @g {
    input %a: bf16[2,3,4]
    input %b: bf16[2,3,4]
    %hi = aten::slice_backward(%b, [2, 3, 8], -1, 4, 8, 1) : bf16[2,3,8]
    %lo = aten::slice_backward(%a, [2, 3, 8], -1, 0, 4, 1) : bf16[2,3,8]
    %g = aten::add.Tensor(%hi, %lo, alpha = 1) : bf16[2,3,8]
    %y = aten::relu(%g) : bf16[2,3,8]
    output y = %y
    output g = %g
  }
}
)",
                                    /*expect_changed=*/true),
            R"(module @m {
  graph @g {
    input %a: bf16[2,3,4]
    input %b: bf16[2,3,4]
    %0 = aten::cat([%a, %b], 2) : bf16[2,3,8]
    %y = aten::relu(%0) : bf16[2,3,8]
    output y = %y
    output g = %0
  }
}
)");
}

// Halves whose strides are like channels last (the gradient of RoPE applied to heads laid
// out [batch, seq, heads, head_dim] and read transposed): aten::cat would lay its result out
// channels last, but the add's result is contiguous and a _reshape_alias reads it as such.
// The cat gets its real layout and a clone to contiguous follows (found as wrong values:
// the interpreter's cat was [1024,1,256,16] where the IR said contiguous).
TEST(SliceGradsToCatTest, ChannelsLastHalvesGetACloneToContiguous) {
  EXPECT_EQ(testing::RunPassOnText("slice-grads-to-cat", R"(module @m {
  graph @g {
    input %a: f32[2,16,4,8]strides[512,1,128,16]
    input %b: f32[2,16,4,8]strides[512,1,128,16]
    %lo = aten::slice_backward(%a, [2, 16, 4, 16], 3, 0, 8, 1) : f32[2,16,4,16]
    %hi = aten::slice_backward(%b, [2, 16, 4, 16], 3, 8, 16, 1) : f32[2,16,4,16]
    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,16,4,16]
    %r = aten::_reshape_alias(%g, [2, 16, 64], [1024, 64, 1]) : f32[2,16,64]
    output r = %r
  }
}
)",
                                    /*expect_changed=*/true),
            R"(module @m {
  graph @g {
    input %a: f32[2,16,4,8]strides[512,1,128,16]
    input %b: f32[2,16,4,8]strides[512,1,128,16]
    %0 = aten::cat([%a, %b], 3) : f32[2,16,4,16]strides[1024,1,256,16]
    %1 = aten::clone(%0, memory_format = 0) : f32[2,16,4,16]
    %r = aten::_reshape_alias(%1, [2, 16, 64], [1024, 64, 1]) : f32[2,16,64]
    output r = %r
  }
}
)");
  // One contiguous half makes LibTorch's cat contiguous: no clone.
  const std::string mixed = testing::RunPassOnText("slice-grads-to-cat", R"(module @m {
  graph @g {
    input %a: f32[2,16,4,8]strides[512,1,128,16]
    input %b: f32[2,16,4,8]
    %lo = aten::slice_backward(%a, [2, 16, 4, 16], 3, 0, 8, 1) : f32[2,16,4,16]
    %hi = aten::slice_backward(%b, [2, 16, 4, 16], 3, 8, 16, 1) : f32[2,16,4,16]
    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,16,4,16]
    output g = %g
  }
}
)",
                                                       /*expect_changed=*/true);
  EXPECT_NE(mixed.find("%0 = aten::cat([%a, %b], 3) : f32[2,16,4,16]\n"), std::string::npos) << mixed;
  EXPECT_EQ(mixed.find("aten::clone"), std::string::npos) << mixed;
  // Rank 5 (channels last 3d: the channel dim innermost, then dims 4, 3, 2, then 0).
  const std::string five = testing::RunPassOnText("slice-grads-to-cat", R"(module @m {
  graph @g {
    input %a: f32[2,3,2,2,2]strides[24,1,12,6,3]
    input %b: f32[2,3,2,2,2]strides[24,1,12,6,3]
    %lo = aten::slice_backward(%a, [2, 3, 2, 2, 4], 4, 0, 2, 1) : f32[2,3,2,2,4]
    %hi = aten::slice_backward(%b, [2, 3, 2, 2, 4], 4, 2, 4, 1) : f32[2,3,2,2,4]
    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,3,2,2,4]
    output g = %g
  }
}
)",
                                                      /*expect_changed=*/true);
  EXPECT_NE(five.find("%0 = aten::cat([%a, %b], 4) : f32[2,3,2,2,4]strides[48,1,24,12,3]\n"), std::string::npos)
      << five;
  EXPECT_NE(five.find("%1 = aten::clone(%0, memory_format = 0) : f32[2,3,2,2,4]\n"), std::string::npos) << five;
}

TEST(SliceGradsToCatTest, LeavesWhatIsNotTwoTilingHalvesReadOnlyByTheAdd) {
  // Overlapping ranges, a step of 2, a fill that something else reads, alpha 2.
  for (const char* body : {
           "%lo = aten::slice_backward(%a, [2, 8], 1, 0, 4, 1) : f32[2,8]\n"
           "    %hi = aten::slice_backward(%a, [2, 8], 1, 3, 7, 1) : f32[2,8]\n"
           "    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,8]",
           "%lo = aten::slice_backward(%a, [2, 8], 1, 0, 8, 2) : f32[2,8]\n"
           "    %hi = aten::slice_backward(%a, [2, 8], 1, 1, 8, 2) : f32[2,8]\n"
           "    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,8]",
           "%lo = aten::slice_backward(%a, [2, 8], 1, 0, 4, 1) : f32[2,8]\n"
           "    %hi = aten::slice_backward(%a, [2, 8], 1, 4, 8, 1) : f32[2,8]\n"
           "    %g = aten::add.Tensor(%lo, %hi, alpha = 1) : f32[2,8]\n"
           "    %n = aten::neg(%lo) : f32[2,8]",
           "%lo = aten::slice_backward(%a, [2, 8], 1, 0, 4, 1) : f32[2,8]\n"
           "    %hi = aten::slice_backward(%a, [2, 8], 1, 4, 8, 1) : f32[2,8]\n"
           "    %g = aten::add.Tensor(%lo, %hi, alpha = 2) : f32[2,8]",
       }) {
    std::string text = absl::StrCat("module @m {\n  graph @g {\n    input %a: f32[2,4]\n    ", body,
                                    "\n    output g = %g\n  }\n}\n");
    // Unchanged (RunPassOnText checks that the pass reports no change).
    testing::RunPassOnText("slice-grads-to-cat", text, /*expect_changed=*/false);
  }
}

}  // namespace
}  // namespace magi
