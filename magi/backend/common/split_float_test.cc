// Split fp32 masters against LibTorch's own bf16 rounding (c10::BFloat16, what a cast
// gives), over every low half of a spread of top halves (every 11th, and the edges: zeros,
// the smallest subnormals and normals, the largest finite values, infinities, NaNs).
#include "magi/backend/common/split_float.h"

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace magi {
namespace {

std::vector<uint32_t> TopHalves() {
  std::vector<uint32_t> tops;
  for (uint32_t top = 0; top <= 0xffff; top += 11) tops.push_back(top);
  for (uint32_t top : {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x0081u, 0x3f80u, 0x7f7eu, 0x7f7fu, 0x7f80u, 0x7fc0u,
                       0x8000u, 0x8001u, 0x8080u, 0xbf80u, 0xff7fu, 0xff80u, 0xffc0u, 0xffffu}) {
    tops.push_back(top);
  }
  return tops;
}

// The checks inside the loop are plain comparisons that report through FAIL() only when they
// fail: an ASSERT_EQ per check (its AssertionResult) cost more than the check itself in this
// unoptimized build, 390 million times over.
TEST(SplitFloatTest, HighHalfIsTheBf16CastAndEveryNonTieJoinsBackBitForBit) {
  int64_t values = 0, ties = 0;
  for (uint32_t top : TopHalves()) {
    for (uint32_t lo = 0; lo <= 0xffff; ++lo) {
      const uint32_t bits = (top << 16) | lo;
      const float x = BitsFloat(bits);
      const SplitFloat split = SplitToBf16(x);
      const uint16_t cast = c10::BFloat16(x).x;
      if (split.hi != cast) {
        FAIL() << std::hex << "bits 0x" << bits << ": high half 0x" << split.hi << ", cast 0x" << cast;
      }
      ++values;
      const float joined = JoinSplit(split.hi, split.lo);
      if (std::isnan(x)) {
        if (!std::isnan(joined)) FAIL() << std::hex << "bits 0x" << bits << ": joined 0x" << FloatBits(joined);
        continue;
      }
      if (lo != 0x8000u) {
        if (FloatBits(joined) != bits) FAIL() << std::hex << "bits 0x" << bits << ": joined 0x" << FloatBits(joined);
        continue;
      }
      // A tie: one ulp toward the bf16 value, which is unchanged.
      ++ties;
      const bool up = (top & 1u) != 0;
      ASSERT_EQ(FloatBits(joined), up ? bits + 1 : bits - 1) << std::hex << "bits 0x" << bits;
      ASSERT_EQ(SplitToBf16(joined).hi, split.hi);
      ASSERT_EQ(FloatBits(JoinSplit(SplitToBf16(joined).hi, SplitToBf16(joined).lo)), FloatBits(joined));
    }
  }
  EXPECT_GT(values, int64_t{390} * 1000 * 1000);
  EXPECT_GT(ties, 5900);  // one per top half that is not a NaN's
}

TEST(SplitFloatTest, NanSplitsToTheCastsQuietNan) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu}) {
    const SplitFloat split = SplitToBf16(BitsFloat(bits));
    EXPECT_EQ(split.hi, 0x7fc0);
    EXPECT_EQ(split.hi, c10::BFloat16(BitsFloat(bits)).x);
    EXPECT_EQ(FloatBits(JoinSplit(split.hi, split.lo)), 0x7fc00000u);
  }
}

TEST(SplitFloatTest, RoundingUpPastTheLargestFiniteBf16GivesInfinityAndJoinsBack) {
  const float largest = BitsFloat(0x7f7fffffu);  // FLT_MAX: its bf16 rounds to infinity
  const SplitFloat split = SplitToBf16(largest);
  EXPECT_EQ(split.hi, 0x7f80);
  EXPECT_EQ(JoinSplit(split.hi, split.lo), largest);
  EXPECT_EQ(SplitToBf16(-largest).hi, 0xff80);
  EXPECT_EQ(JoinSplit(SplitToBf16(-largest).hi, SplitToBf16(-largest).lo), -largest);
}

}  // namespace
}  // namespace magi
