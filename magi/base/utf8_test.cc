#include "magi/base/utf8.h"

#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(Utf8Test, AcceptsValidText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("layers.0.mlp"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9"));               // é
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));              // €
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));          // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));          // U+10FFFF
}

TEST(Utf8Test, FindsTheFirstInvalidByte) {
  EXPECT_EQ(ValidUtf8Prefix("ab\xff"), 2u);              // never valid
  EXPECT_EQ(ValidUtf8Prefix("a\x80"), 1u);               // a lone continuation byte
  EXPECT_EQ(ValidUtf8Prefix("\xc3"), 0u);                // truncated
  EXPECT_EQ(ValidUtf8Prefix("\xc0\xaf"), 0u);            // overlong '/'
  EXPECT_EQ(ValidUtf8Prefix("\xe0\x80\xaf"), 0u);        // overlong
  EXPECT_EQ(ValidUtf8Prefix("x\xed\xa0\x80"), 1u);       // a surrogate
  EXPECT_EQ(ValidUtf8Prefix("\xf4\x90\x80\x80"), 0u);    // past U+10FFFF
  EXPECT_EQ(ValidUtf8Prefix("\xc3\xa9\xe2\x82"), 2u);    // é, then a truncated €
}

}  // namespace
}  // namespace magi
