#include "magi/runtime/distributed/rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace magi {
namespace {

absl::Status ReadInt(const char* name, int* out, int min_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(text, out) || *out < min_value) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", text,
                                                   "' is not an integer >= ", min_value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment() {
  DistributedEnv env;
  absl::Status status = ReadInt("RANK", &env.rank, 0);
  if (status.ok()) status = ReadInt("WORLD_SIZE", &env.world_size, 1);
  if (status.ok()) status = ReadInt("LOCAL_RANK", &env.local_rank, 0);
  if (status.ok()) status = ReadInt("MASTER_PORT", &env.master_port, 1);
  if (!status.ok()) return status;
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') env.master_addr = addr;
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("RANK=", env.rank, " is not below WORLD_SIZE=", env.world_size));
  }
  return env;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const DistributedEnv& env,
                                                             std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = env.world_size;
  options.waitWorkers = true;
  options.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& error) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", env.rank, ": rendezvous at ", env.master_addr, ":",
                                                    env.master_port, " failed: ", error.what()));
  }
}

}  // namespace magi
