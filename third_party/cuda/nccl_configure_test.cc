// Checks that @local_nccl is a working NCCL: the header the compiler sees and the
// library the program loads are the version the repository rule detected. Needs no GPU.
#include <nccl.h>

#include "gtest/gtest.h"

namespace {

TEST(NcclConfigureTest, HeaderAndLibraryAgree) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  EXPECT_EQ(std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH),
            MAGI_EXPECTED_NCCL_VERSION);
}

TEST(NcclConfigureTest, ErrorStringsComeFromTheLibrary) {
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)");
}

}  // namespace
