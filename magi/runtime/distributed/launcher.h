// Runs N local worker processes of a program, as torchrun would.
//
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT in its environment, plus `extra_env`. If a child fails, the others are
// terminated (SIGTERM, then SIGKILL after `grace`), so a crashed rank never leaves its
// peers hanging. Returns the first failing child's exit status (0 when all succeed).
#ifndef MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_
#define MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace magi {

struct LaunchResult {
  int exit_code = 0;     // the first failure's code (128 + signal when killed), else 0
  int failed_rank = -1;  // which rank failed first, -1 if none
};

absl::StatusOr<LaunchResult> LaunchLocalWorkers(int world_size, const std::vector<std::string>& argv,
                                                const std::map<std::string, std::string>& extra_env = {},
                                                std::chrono::milliseconds grace = std::chrono::seconds(5));

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> PickFreePort();

}  // namespace magi

#endif  // MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_
