// Runs N local worker processes of a program, as torchrun would.
//
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT in its environment, plus `extra_env`. If a child fails, the others are
// terminated (SIGTERM, then SIGKILL after `grace`), so a crashed rank never leaves its
// peers hanging. Returns the first failing child's exit status (0 when all succeed).
//
// Workers die with their launcher: each is started with PR_SET_PDEATHSIG = SIGKILL, so
// killing the launcher (even with SIGKILL) kills them at once instead of leaving them
// training as orphans. The signal follows the thread that called LaunchLocalWorkers,
// which stays in this call until every worker has exited.
#ifndef MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_
#define MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace magi {

struct LaunchResult {
  int exit_code = 0;     // the first failure's code (128 + signal when killed), else 0
  int failed_rank = -1;  // which rank failed first, -1 if none
  // From the first failure the launcher saw to the last worker reaped: how long the other ranks
  // ran on (SIGTERM at once, SIGKILL after `grace`); 0 when none failed.
  double stop_seconds = 0;
};

absl::StatusOr<LaunchResult> LaunchLocalWorkers(int world_size, const std::vector<std::string>& argv,
                                                const std::map<std::string, std::string>& extra_env = {},
                                                std::chrono::milliseconds grace = std::chrono::seconds(5));

// For programs that are their own workers: when neither RANK nor SLURM_PROCID (srun's
// tasks are ranks already) is set and `world_size` > 1,
// runs `world_size` copies of this executable (/proc/self/exe) with the same arguments
// and returns the exit code to end with; otherwise returns nullopt (this process is a
// worker, or the only process). Prints which rank failed, if one did.
std::optional<int> RunLocalWorkersIfLauncher(int world_size, int argc, char** argv);

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> PickFreePort();

}  // namespace magi

#endif  // MAGI_RUNTIME_DISTRIBUTED_LAUNCHER_H_
