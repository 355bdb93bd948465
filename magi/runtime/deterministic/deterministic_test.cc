#include "magi/runtime/deterministic/deterministic.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "magi/compat/deterministic.h"

namespace magi {
namespace {

void UnsetAll() {
  for (const PinnedEnv& pin : DeterministicEnvironment()) ::unsetenv(pin.name);
  compat::SetDeterministicAlgorithms(false);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "(unset)" : value;
}

TEST(DeterministicModeTest, SetsAtenAndEveryUnsetVariable) {
  UnsetAll();
  absl::StatusOr<std::string> summary = EnableDeterministicMode();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(compat::DeterministicAlgorithmsEnabled());
  EXPECT_EQ(Env("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_EQ(Env("NCCL_ALGO"), "Ring");
  EXPECT_EQ(Env("NCCL_PROTO"), "Simple");
  EXPECT_EQ(Env("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(Env("PYTORCH_TUNABLEOP_ENABLED"), "0");
  EXPECT_EQ(Env("TORCHINDUCTOR_MAX_AUTOTUNE"), "0");
  EXPECT_EQ(Env("MKL_CBWR"), "AUTO");
  EXPECT_NE(summary->find("aten deterministic (errors)"), std::string::npos) << *summary;
  EXPECT_NE(summary->find("intra-op threads "), std::string::npos) << *summary;
  EXPECT_NE(summary->find("NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0"), std::string::npos) << *summary;
}

TEST(DeterministicModeTest, KeepsValuesThatKeepTheContract) {
  UnsetAll();
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  ::setenv("MKL_CBWR", "COMPATIBLE", 1);
  ASSERT_TRUE(EnableDeterministicMode().ok());
  EXPECT_EQ(Env("CUBLAS_WORKSPACE_CONFIG"), ":16:8");
  EXPECT_EQ(Env("MKL_CBWR"), "COMPATIBLE");
}

TEST(DeterministicModeTest, RefusesConflictingValuesNamingTheVariable) {
  UnsetAll();
  ::setenv("NCCL_ALGO", "Tree", 1);
  absl::StatusOr<std::string> summary = EnableDeterministicMode();
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(summary.status().message(),
            "deterministic mode needs NCCL_ALGO=Ring or ring (one reduction order whatever the message size), but "
            "the environment has NCCL_ALGO=Tree");
  EXPECT_FALSE(compat::DeterministicAlgorithmsEnabled());  // nothing after the conflict is applied
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  EXPECT_EQ(EnableDeterministicMode().status().message(),
            "deterministic mode needs CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8 (cuBLAS reduces in a fixed order only "
            "with a fixed workspace configuration), but the environment has CUBLAS_WORKSPACE_CONFIG=:0:0");
}

TEST(DeterministicModeTest, TheNcclPartAlone) {
  UnsetAll();
  ASSERT_TRUE(PinNcclForDeterminism().ok());
  EXPECT_EQ(Env("NCCL_ALGO"), "Ring");
  EXPECT_EQ(Env("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(Env("CUBLAS_WORKSPACE_CONFIG"), "(unset)");  // not NCCL's
  EXPECT_FALSE(compat::DeterministicAlgorithmsEnabled());
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  EXPECT_EQ(PinNcclForDeterminism().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace magi
