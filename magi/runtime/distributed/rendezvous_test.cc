// The environment the launchers set up, read without starting anything.
#include "magi/runtime/distributed/rendezvous.h"

#include <chrono>
#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace magi {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID",
                             "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID"}) {
      ::unsetenv(name);
    }
  }
  static void Set(const char* name, const char* value) { ::setenv(name, value, 1); }
};

TEST_F(EnvTest, NothingSetIsOneProcess) {
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->source, "single");
}

// A lone process's store is in memory: two of them side by side do not fight over a port
// (two tests of one CI run both took the default 29500 and one failed with EADDRINUSE).
TEST_F(EnvTest, LoneProcessesGetStoresWithoutAPort) {
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> a = ConnectStore(*env, std::chrono::seconds(5));
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> b = ConnectStore(*env, std::chrono::seconds(5));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  (*a)->set("key", std::vector<uint8_t>{1, 2});
  EXPECT_EQ((*a)->get("key"), (std::vector<uint8_t>{1, 2}));
  EXPECT_FALSE((*b)->check({"key"}));  // each its own
}

TEST_F(EnvTest, TorchrunAgentStore) {
  Set("RANK", "3");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "1");
  Set("MASTER_ADDR", "node0");
  Set("MASTER_PORT", "29400");
  Set("TORCHELASTIC_USE_AGENT_STORE", "True");
  Set("TORCHELASTIC_RESTART_COUNT", "2");
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_TRUE(env->use_agent_store);
  EXPECT_EQ(env->restart_count, 2);
  EXPECT_EQ(env->source, "env");
}

TEST_F(EnvTest, Slurm) {
  Set("SLURM_PROCID", "5");
  Set("SLURM_NTASKS", "8");
  Set("SLURM_LOCALID", "1");
  Set("SLURM_JOB_NODELIST", "gpu[017-020,031],login2");
  Set("SLURM_JOB_ID", "1234567");
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "gpu017");
  EXPECT_EQ(env->master_port, 15000 + 4567);
  EXPECT_EQ(env->source, "slurm");
  EXPECT_FALSE(env->use_agent_store);
}

TEST_F(EnvTest, SlurmMasterVariablesWin) {
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "2");
  Set("SLURM_JOB_NODELIST", "a,b");
  Set("MASTER_ADDR", "10.0.0.7");
  Set("MASTER_PORT", "23456");
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 23456);
}

TEST_F(EnvTest, RankWinsOverSlurm) {  // torchrun inside an allocation
  Set("RANK", "1");
  Set("WORLD_SIZE", "2");
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "1");
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->source, "env");
}

TEST_F(EnvTest, SlurmErrorsNameTheVariable) {
  Set("SLURM_PROCID", "0");
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(), "SLURM_PROCID is set but SLURM_NTASKS is not (run the workers with srun)");
  Set("SLURM_NTASKS", "2");
  Set("SLURM_PROCID", "2");
  Set("SLURM_JOB_NODELIST", "n1");
  env = DistributedEnvFromEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(), "SLURM_PROCID=2 is not below SLURM_NTASKS=2");
  Set("SLURM_PROCID", "1");
  Set("SLURM_JOB_NODELIST", "n[1-2");
  env = DistributedEnvFromEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(), "SLURM_JOB_NODELIST: unbalanced '[' in host list 'n[1-2'");
}

TEST(SlurmNodeListTest, FirstHost) {
  EXPECT_EQ(*FirstHostOfSlurmNodeList("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(*FirstHostOfSlurmNodeList("rack[1-2]-n[3-4]"), "rack1-n3");
  EXPECT_EQ(*FirstHostOfSlurmNodeList("a,b"), "a");
  EXPECT_EQ(*FirstHostOfSlurmNodeList("host-1"), "host-1");
  EXPECT_EQ(*FirstHostOfSlurmNodeList("nid[7,3]"), "nid7");
  EXPECT_FALSE(FirstHostOfSlurmNodeList("x]").ok());
  EXPECT_FALSE(FirstHostOfSlurmNodeList("").ok());
}

}  // namespace
}  // namespace magi
