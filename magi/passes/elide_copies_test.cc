#include "magi/passes/elide_copies.h"

#include "gtest/gtest.h"
#include "magi/passes/pass_test_util.h"

namespace magi {
namespace {

TEST(ElideCopiesTest, GradientAccumulationCopiesGo) {
  EXPECT_EQ(testing::RunPassOnText("elide-copies", R"(module @m {
  graph @g {
    input %x: f32[4,8]
    %m = aten::mul.Tensor(%x, %x) : f32[4,8]
    %t = aten::t(%m) : f32[8,4]strides[1,8]
    %tt = aten::t(%t) : f32[4,8]
    %e = aten::new_empty_strided(%tt, [4, 8], [8, 1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4,8]
    %c = aten::copy(%e, %tt, false) : f32[4,8]
    %y = aten::relu(%c) : f32[4,8]
    output y = %y
    output grad = %c
  }
}
)",
                                    /*expect_changed=*/true),
            R"(module @m {
  graph @g {
    input %x: f32[4,8]
    %m = aten::mul.Tensor(%x, %x) : f32[4,8]
    %t = aten::t(%m) : f32[8,4]strides[1,8]
    %tt = aten::t(%t) : f32[4,8]
    %e = aten::new_empty_strided(%tt, [4, 8], [8, 1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4,8]
    %c = aten::copy(%e, %tt, false) : f32[4,8]
    %y = aten::relu(%tt) : f32[4,8]
    output y = %y
    output grad = %tt
  }
}
)");
}

TEST(ElideCopiesTest, CopiesThatChangeSomethingStay) {
  // A layout change, a slice of a larger storage, a dtype change, and a copy of an input.
  testing::RunPassOnText("elide-copies", R"(module @m {
  graph @g {
    input %x: f32[4,8]
    %m = aten::mul.Tensor(%x, %x) : f32[4,8]
    %t = aten::t(%m) : f32[8,4]strides[1,8]
    %e1 = aten::new_empty_strided(%t, [8, 4], [4, 1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[8,4]
    %c1 = aten::copy(%e1, %t, false) : f32[8,4]
    %s = aten::slice.Tensor(%m, 0, 0, 2, 1) : f32[2,8]
    %e2 = aten::new_empty_strided(%s, [2, 8], [8, 1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[2,8]
    %c2 = aten::copy(%e2, %s, false) : f32[2,8]
    %e3 = aten::new_empty_strided(%x, [4, 8], [8, 1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4,8]
    %c3 = aten::copy(%e3, %x, false) : f32[4,8]
    output a = %c1
    output b = %c2
    output c = %c3
  }
}
)",
                         /*expect_changed=*/false);
}

}  // namespace
}  // namespace magi
