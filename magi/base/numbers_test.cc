#include "magi/base/numbers.h"

#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(NumbersTest, FiniteNumbersParse) {
  double x = -1;
  EXPECT_TRUE(ParseFiniteDouble("0.0085", &x));
  EXPECT_DOUBLE_EQ(x, 0.0085);
  EXPECT_TRUE(ParseFiniteDouble("-2", &x));
  EXPECT_DOUBLE_EQ(x, -2);
  EXPECT_TRUE(ParseFiniteDouble("1e300", &x));
}

TEST(NumbersTest, NanInfinityAndGarbageAreRefused) {
  for (const char* text : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "Infinity", "1e400", "", "lots", "1.5x"}) {
    double x = 7;
    EXPECT_FALSE(ParseFiniteDouble(text, &x)) << text;
    EXPECT_EQ(x, 7) << text;
  }
}

TEST(NumbersTest, BytesFromDouble) {
  EXPECT_EQ(BytesFromDouble(0), 0);
  EXPECT_EQ(BytesFromDouble(8.5e6), 8500000);
  EXPECT_EQ(BytesFromDouble(9.2e18), int64_t{9200000000000000000});
  EXPECT_EQ(BytesFromDouble(9.3e18), std::nullopt);
  EXPECT_EQ(BytesFromDouble(-1), std::nullopt);
  EXPECT_EQ(BytesFromDouble(std::nan("")), std::nullopt);
}

}  // namespace
}  // namespace magi
