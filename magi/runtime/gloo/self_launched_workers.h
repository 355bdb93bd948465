// For tests whose binary is its own worker: a gtest case launches the binary again as local
// ranks (the local launcher, as torchrun would) with one environment variable naming what to
// run; each rank connects the launcher's Gloo group, runs it, and reports a failure to its
// stderr and to a file the case reads back.
//
//   int main(int argc, char** argv) {
//     g_self = argv[0];
//     if (const char* scenario = std::getenv("MY_TEST_WORKER")) {
//       return RunGlooWorker([&](std::shared_ptr<Communicator> c) { return RunScenario(scenario, c); });
//     }
//     ...RUN_ALL_TESTS...
//   }
//   TEST(MyTest, Case) { EXPECT_EQ(LaunchWorkers(g_self, 1, "MY_TEST_WORKER", "case"), ""); }
#ifndef MAGI_RUNTIME_GLOO_SELF_LAUNCHED_WORKERS_H_
#define MAGI_RUNTIME_GLOO_SELF_LAUNCHED_WORKERS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "magi/comm/communicator.h"

namespace magi {

// In a worker: MAGI_TEST_OUT/name, the folder its test case reads.
std::string WorkerOutPath(const std::string& name);

// In a worker: runs `before_connect` (if given: process settings that must precede any
// collective), connects the launcher's Gloo group "dp" (60 s timeouts) and runs `run` on it.
// Returns 0 when both returned OK; else 1, with the failure on stderr and in
// WorkerOutPath("error").
int RunGlooWorker(const std::function<absl::Status(std::shared_ptr<Communicator>)>& run,
                  const std::function<absl::Status()>& before_connect = {});

// In a test case: launches `self` as `world` local ranks with `variable` = `scenario` and
// MAGI_TEST_OUT a folder of its own under TEST_TMPDIR; "" when every rank exited 0, else
// what the worker wrote to its error file (or how the launch failed).
std::string LaunchWorkers(const std::string& self, int world, const std::string& variable,
                          const std::string& scenario);

}  // namespace magi

#endif  // MAGI_RUNTIME_GLOO_SELF_LAUNCHED_WORKERS_H_
