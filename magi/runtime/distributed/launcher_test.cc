// The local launcher with real processes. This binary is also the launcher and the
// workers of its own tests: MAGI_LAUNCHER_TEST_ROLE selects the part it plays.
#include "magi/runtime/distributed/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace magi {
namespace {

std::string g_self;

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// A worker: says it is up (its pid, written atomically), then works for a minute.
int RunWorker(const std::string& dir) {
  std::string rank = std::getenv("RANK");
  std::string path = dir + "/worker" + rank + ".pid";
  std::ofstream(path + ".tmp") << ::getpid() << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
  if (std::getenv("MAGI_LAUNCHER_TEST_EXIT") != nullptr) return std::atoi(std::getenv("MAGI_LAUNCHER_TEST_EXIT"));
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

// A launcher of two workers that run until killed.
int RunLauncher(const std::string& dir) {
  absl::StatusOr<LaunchResult> result =
      LaunchLocalWorkers(2, {g_self}, {{"MAGI_LAUNCHER_TEST_ROLE", "worker"}, {"MAGI_LAUNCHER_TEST_DIR", dir}});
  return result.ok() ? result->exit_code : 99;
}

pid_t ReadPid(const std::string& path) {
  std::ifstream file(path);
  pid_t pid = 0;
  return file >> pid ? pid : 0;
}

TEST(LauncherTest, ReportsTheFirstFailingRank) {
  std::string dir = TestDir() + "/fail";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(
      2, {g_self},
      {{"MAGI_LAUNCHER_TEST_ROLE", "worker"}, {"MAGI_LAUNCHER_TEST_DIR", dir}, {"MAGI_LAUNCHER_TEST_EXIT", "3"}});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_GE(result->failed_rank, 0);
}

// One rank exits with an error while the other would sleep for a minute: the launcher stops the
// sleeper at once (SIGTERM), long before its grace period of 30 s would send SIGKILL.
TEST(LauncherTest, StopsTheOtherRanksAtOnce) {
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(
      2, {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 5; fi; exec sleep 60"}, {}, std::chrono::seconds(30));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->failed_rank, 1);
  EXPECT_EQ(result->exit_code, 5);
  EXPECT_GT(result->stop_seconds, 0);
  EXPECT_LT(result->stop_seconds, 2.0);  // one 20 ms poll and a SIGTERM; 2 s leaves room for load
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
}

// A rank writing to a dead peer's socket gets EPIPE (an error it reports), not a silent death
// by SIGPIPE that could be taken for the first failure: workers start with SIGPIPE ignored.
TEST(LauncherTest, WorkersIgnoreSigpipe) {
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(1, {"/bin/sh", "-c", "kill -PIPE $$; exit 0"}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->failed_rank, -1) << "exit code " << result->exit_code;
}

TEST(LauncherTest, AProgramThatCannotStartIsAnError) {
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(2, {"/nonexistent/program"});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "cannot start /nonexistent/program: No such file or directory");
}

// Under srun each task is a rank already: launching copies would make one job per task.
TEST(LauncherTest, ASlurmTaskIsAWorker) {
  ASSERT_EQ(std::getenv("RANK"), nullptr);
  ::setenv("SLURM_PROCID", "1", 1);
  char arg0[] = "/nonexistent/program";
  char* argv[] = {arg0, nullptr};
  std::optional<int> code = RunLocalWorkersIfLauncher(2, 1, argv);
  ::unsetenv("SLURM_PROCID");
  EXPECT_FALSE(code.has_value()) << "launched workers under SLURM, exit code " << *code;
}

// Issue 14: after a SIGKILL of the launcher, its workers kept training for 40+ s.
TEST(LauncherTest, WorkersDieWhenTheLauncherIsKilled) {
  // Orphans are re-parented to this process, so it can reap them and see how they died.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::string dir = TestDir() + "/orphans";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::setenv("MAGI_LAUNCHER_TEST_ROLE", "launcher", 1);
    ::setenv("MAGI_LAUNCHER_TEST_DIR", dir.c_str(), 1);
    ::execl(g_self.c_str(), g_self.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::vector<pid_t> workers(2, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((workers[0] == 0 || workers[1] == 0) && std::chrono::steady_clock::now() < deadline) {
    for (int rank = 0; rank < 2; ++rank) workers[rank] = ReadPid(dir + "/worker" + std::to_string(rank) + ".pid");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(workers[0] > 0 && workers[1] > 0) << "the workers did not start";

  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  ASSERT_EQ(::waitpid(launcher, nullptr, 0), launcher);
  auto killed = std::chrono::steady_clock::now();
  for (pid_t worker : workers) {
    int status = 0;
    pid_t reaped = 0;
    while ((reaped = ::waitpid(worker, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() - killed < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reaped != worker) {
      ::kill(worker, SIGKILL);  // leave no orphan behind, even when the test fails
      ::waitpid(worker, nullptr, 0);
      ADD_FAILURE() << "worker " << worker << " still ran 10 s after its launcher was killed";
      continue;
    }
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "worker status " << status;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  magi::g_self = argv[0];
  if (const char* role = std::getenv("MAGI_LAUNCHER_TEST_ROLE")) {
    std::string dir = std::getenv("MAGI_LAUNCHER_TEST_DIR");
    if (std::string(role) == "worker") return magi::RunWorker(dir);
    if (std::string(role) == "launcher") return magi::RunLauncher(dir);
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
