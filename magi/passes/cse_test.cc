#include "magi/passes/cse.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/passes/pass_test_util.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

std::string RunCse(absl::string_view input, bool expect_changed) {
  return testing::RunPassOnText("cse", input, expect_changed);
}

TEST(CseTest, MergesRepeatedComputationsTransitively) {
  EXPECT_EQ(RunCse(R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::mul.Scalar(%x, 2.0) : f32[4]
    %b = aten::mul.Scalar(%x, 2.0) : f32[4]
    %c = aten::relu(%a) : f32[4]
    %d = aten::relu(%b) : f32[4]
    %e = aten::add.Tensor(%c, %d, alpha = 1) : f32[4]
    output e = %e
  }
}
)",
                   true),
            R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::mul.Scalar(%x, 2.0) : f32[4]
    %c = aten::relu(%a) : f32[4]
    %e = aten::add.Tensor(%c, %c, alpha = 1) : f32[4]
    output e = %e
  }
}
)");
}

TEST(CseTest, DifferentConstantsOrTypesStayApart) {
  constexpr absl::string_view kDistinct = R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::mul.Scalar(%x, 2.0) : f32[4]
    %b = aten::mul.Scalar(%x, 2) : f32[4]
    %c = aten::_to_copy(%x, dtype = dtype(bf16)) : bf16[4]
    %d = aten::_to_copy(%x, dtype = dtype(f16)) : f16[4]
    output a = %a
    output b = %b
    output c = %c
    output d = %d
  }
}
)";
  EXPECT_EQ(RunCse(kDistinct, false), kDistinct);
}

TEST(CseTest, KeepsRandomInPlaceAndCollectives) {
  constexpr absl::string_view kKeep = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[4]
    %r1 = aten::bernoulli.p(%x, 0.5) : f32[4]
    %r2 = aten::bernoulli.p(%x, 0.5) : f32[4]
    %i1 = aten::add_.Tensor(%x, %x) : f32[4]
    %i2 = aten::add_.Tensor(%x, %x) : f32[4]
    %f1 = magi::all_gather_start([%x], group = "dp") : future<f32[8]>
    %g1 = magi::wait(%f1) : f32[8]
    %f2 = magi::all_gather_start([%x], group = "dp") : future<f32[8]>
    %g2 = magi::wait(%f2) : f32[8]
    output r1 = %r1
    output r2 = %r2
    output g1 = %g1
    output g2 = %g2
  }
}
)";
  EXPECT_EQ(RunCse(kKeep, false), kKeep);
}

}  // namespace
}  // namespace magi
