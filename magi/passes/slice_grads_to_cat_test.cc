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
