#include "magi/base/host_memory.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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
  EXPECT_EQ(ParseMemAvailable("MemAvailable: 99999999999999999999 kB\n"), std::nullopt);  // not an int64
  EXPECT_EQ(ParseMemAvailable("MemAvailable: 9007199254740992 kB\n"), std::nullopt);      // bytes past int64
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/cgroup_test_" + std::to_string(::getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/memory");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(root_ + "/" + name) << text; }
  std::string root_;
};

TEST_F(CgroupTest, V2LimitMinusUsage) {
  Write("memory.max", "1000000\n");
  Write("memory.current", "400000\n");
  EXPECT_EQ(CgroupMemoryAvailable(root_), 600000);
}

TEST_F(CgroupTest, V1LimitMinusUsageAndNeverBelowZero) {
  Write("memory/memory.limit_in_bytes", "1000000\n");
  Write("memory/memory.usage_in_bytes", "1500000\n");
  EXPECT_EQ(CgroupMemoryAvailable(root_), 0);
}

TEST_F(CgroupTest, NoLimitIsUnknown) {
  Write("memory.max", "max\n");
  Write("memory.current", "400000\n");
  Write("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  Write("memory/memory.usage_in_bytes", "400000\n");
  EXPECT_EQ(CgroupMemoryAvailable(root_), std::nullopt);
}

TEST_F(CgroupTest, NothingReadableIsUnknown) { EXPECT_EQ(CgroupMemoryAvailable(root_ + "/none"), std::nullopt); }

TEST(HostMemoryTest, ThisHostHasSomeMemoryAvailable) {
  std::optional<int64_t> available = AvailableHostMemoryBytes();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace magi
