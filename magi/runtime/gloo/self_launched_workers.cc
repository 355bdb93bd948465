#include "magi/runtime/gloo/self_launched_workers.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "magi/base/file.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/gloo/gloo_communicator.h"

namespace magi {

std::string WorkerOutPath(const std::string& name) {
  const char* out = std::getenv("MAGI_TEST_OUT");
  return std::string(out != nullptr ? out : "/tmp") + "/" + name;
}

int RunGlooWorker(const std::function<absl::Status(std::shared_ptr<Communicator>)>& run,
                  const std::function<absl::Status()>& before_connect) {
  auto fail = [](absl::string_view message) {
    std::cerr << "worker failed: " << message << std::endl;
    std::ofstream(WorkerOutPath("error")) << message;
    return 1;
  };
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) return fail(env.status().message());
  if (before_connect) {
    if (absl::Status status = before_connect(); !status.ok()) return fail(status.message());
  }
  auto store = ConnectStore(*env, std::chrono::seconds(60));
  if (!store.ok()) return fail(store.status().message());
  absl::StatusOr<std::shared_ptr<Communicator>> communicator =
      CreateGlooCommunicator(*store, env->rank, env->world_size, "dp", std::chrono::seconds(60));
  if (!communicator.ok()) return fail(communicator.status().message());
  absl::Status done = run(*communicator);
  return done.ok() ? 0 : fail(done.message());
}

std::string LaunchWorkers(const std::string& self, int world, const std::string& variable,
                          const std::string& scenario) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string out = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + scenario;
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) return absl::StrCat("cannot create ", out, ": ", error.message());
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(world, {self}, {{variable, scenario}, {"MAGI_TEST_OUT", out}});
  if (!result.ok()) return result.status().ToString();
  if (result->exit_code == 0) return "";
  absl::StatusOr<std::string> written = ReadFile(out + "/error");
  return written.ok() ? *written : absl::StrCat("exit ", result->exit_code, " without a message");
}

}  // namespace magi
