#include "magi/base/host_memory.h"

#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(HostMemoryTest, ParsesMemAvailableInKibibytes) {
  EXPECT_EQ(ParseMemAvailable("MemTotal:       24600000 kB\nMemFree:         1000 kB\n"
                              "MemAvailable:   12345678 kB\nBuffers:          100 kB\n"),
            int64_t{12345678} * 1024);
}

TEST(HostMemoryTest, AMissingOrMalformedLineIsUnknown) {
  EXPECT_EQ(ParseMemAvailable("MemTotal: 24600000 kB\nMemFree: 1000 kB\n"), std::nullopt);  // kernels before 3.14
  EXPECT_EQ(ParseMemAvailable("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: 12345678 MB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: -5 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: 99999999999999999999 kB\n"), std::nullopt);
}

TEST(HostMemoryTest, ThisHostHasSomeMemoryAvailable) {
  std::optional<int64_t> available = AvailableHostMemoryBytes();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace magi
