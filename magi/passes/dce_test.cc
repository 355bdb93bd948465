#include "magi/passes/dce.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/passes/pass_test_util.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

std::string RunDce(absl::string_view input, bool expect_changed) {
  return testing::RunPassOnText("dce", input, expect_changed);
}

TEST(DceTest, RemovesDeadChainsAndKeepsInputs) {
  EXPECT_EQ(RunDce(R"(module @m {
  graph @g {
    input %x: f32[4]
    input %unused: f32[4]
    %a = aten::relu(%x) : f32[4]
    %b = aten::neg(%a) : f32[4]
    %c = aten::exp(%b) : f32[4]
    %y = aten::sin(%x) : f32[4]
    output y = %y
  }
}
)",
                   true),
            R"(module @m {
  graph @g {
    input %x: f32[4]
    input %unused: f32[4]
    %y = aten::sin(%x) : f32[4]
    output y = %y
  }
}
)");
}

TEST(DceTest, NothingDeadIsNoChange) {
  constexpr absl::string_view kLive = R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::relu(%x) : f32[4]
    output a = %a
  }
}
)";
  EXPECT_EQ(RunDce(kLive, false), kLive);
}

TEST(DceTest, KeepsInPlaceAndOutVariants) {
  constexpr absl::string_view kEffects = R"(module @m {
  graph @g {
    input %x: f32[4]
    input %buf: f32[4] {role = buffer}
    %a = aten::add_.Tensor(%buf, %x) : f32[4]
    %b = aten::mul.out(%x, %x, out = %buf) : f32[4]
    %c = aten::_to_copy(%x) : f32[4]
    output x = %x
  }
}
)";
  EXPECT_EQ(RunDce(kEffects, true), R"(module @m {
  graph @g {
    input %x: f32[4]
    input %buf: f32[4] {role = buffer}
    %a = aten::add_.Tensor(%buf, %x) : f32[4]
    %b = aten::mul.out(%x, %x, out = %buf) : f32[4]
    output x = %x
  }
}
)");
}

TEST(DceTest, RemovesWholeDeadCollectivePairs) {
  EXPECT_EQ(RunDce(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %w: f32[4]
    %f = magi::all_gather_start([%w], group = "dp") : future<f32[8]>
    %full = magi::wait(%f) : f32[8]
    output w = %w
  }
}
)",
                   true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %w: f32[4]
    output w = %w
  }
}
)");
}

// aten::__and__ ends in '_' but is not in place (the op traits table knows the
// in-place dunders): an unused one is dead; an unused __iand__ writes its input and stays.
TEST(DceTest, DunderOpsAreInPlaceOnlyWhenTheTableSaysSo) {
  EXPECT_EQ(RunDce(R"(module @m {
  graph @g {
    input %x: bool[4]
    input %y: bool[4]
    %a = aten::__and__.Tensor(%x, %y) : bool[4]
    %b = aten::__iand__.Tensor(%x, %y) : bool[4]
    output y = %y
  }
}
)",
                   true),
            R"(module @m {
  graph @g {
    input %x: bool[4]
    input %y: bool[4]
    %b = aten::__iand__.Tensor(%x, %y) : bool[4]
    output y = %y
  }
}
)");
}

TEST(DceTest, RejectsOptions) {
  auto pass = Registry<Pass>::Global().Create("dce", {{"aggressive", "1"}});
  EXPECT_EQ(pass.status().message(), "dce: unknown option 'aggressive'; there are no options");
}

}  // namespace
}  // namespace magi
