#include "magi/base/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace magi {
namespace {

// Check values from RFC 3720 (iSCSI), appendix B.4, and the usual "123456789".
TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(Crc32cHex(0xe3069283u), "e3069283");
  EXPECT_EQ(Crc32cHex(0x1u), "00000001");
}

TEST(Crc32cTest, ExtendingEqualsOneShotAtEverySplit) {
  std::string data;
  for (int i = 0; i < 100; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = Crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    EXPECT_EQ(Crc32cExtend(Crc32c(data.substr(0, split)), data.substr(split)), whole) << split;
  }
  data[50] ^= 1;  // one flipped bit changes it
  EXPECT_NE(Crc32c(data), whole);
}

}  // namespace
}  // namespace magi
