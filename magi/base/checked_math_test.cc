#include "magi/base/checked_math.h"

#include <limits>

#include "gtest/gtest.h"

namespace magi {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedMathTest, ExactResultsPassThrough) {
  EXPECT_EQ(CheckedAdd(2, 3), 5);
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedAdd(kMax, 0), kMax);
  EXPECT_EQ(SaturatingAdd(1, 2), 3);
}

TEST(CheckedMathTest, OverflowIsNullopt) {
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(int64_t{1} << 62, int64_t{1} << 62), std::nullopt);
  EXPECT_EQ(CheckedMul(int64_t{3037000500}, int64_t{3037000500}), std::nullopt);
  EXPECT_EQ(CheckedMul(int64_t{1} << 62, 4), std::nullopt);
  EXPECT_EQ(SaturatingAdd(kMax, 5), kMax);
  EXPECT_EQ(SaturatingAdd(kMin, -5), kMin);
}

}  // namespace
}  // namespace magi
