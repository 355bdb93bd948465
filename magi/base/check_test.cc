#include "magi/base/check.h"

#include "gtest/gtest.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

TEST(CheckTest, PassingCheckDoesNothing) { MAGI_CHECK(1 + 1 == 2) << "never printed"; }

TEST(CheckDeathTest, FailingCheckAbortsWithConditionAndMessage) {
  EXPECT_DEATH(MAGI_CHECK(1 + 1 == 3) << "math is broken", "MAGI_CHECK failed: 1 \\+ 1 == 3 math is broken");
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  MAGI_ASSIGN_OR_RETURN(int half, Half(x));
  MAGI_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
}

}  // namespace
}  // namespace magi
