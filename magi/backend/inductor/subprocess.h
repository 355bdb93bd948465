// Runs other programs (the inductor backend's Python compile step) without a shell: argv
// as given, the environment of this process plus overrides, stdout and stderr to files or
// inherited. No LibTorch.
//
//   absl::StatusOr<Process> p = Process::Start({"/usr/bin/python3", "aoti_compile.py", job},
//                                              {{"TMPDIR", tmp}}, /*stdout_path=*/log, /*stderr_path=*/"");
//   absl::StatusOr<int> exit_code = p->Wait();   // a signal is an error naming it
#ifndef MAGI_BACKEND_INDUCTOR_SUBPROCESS_H_
#define MAGI_BACKEND_INDUCTOR_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace magi::inductor {

class Process {
 public:
  // Starts argv[0] (a path, or a name looked up on PATH) with `argv`. `env` entries replace
  // or add variables. An empty `stdout_path`/`stderr_path` inherits this process's; a path
  // is opened for appending (created if missing). NotFound when argv[0] cannot be run.
  static absl::StatusOr<Process> Start(const std::vector<std::string>& argv,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       const std::string& stdout_path, const std::string& stderr_path);
  Process(Process&& other) noexcept : pid_(other.pid_), name_(std::move(other.name_)) { other.pid_ = -1; }
  Process& operator=(Process&&) = delete;
  // A process never waited for is waited for here (no zombies), after it ends by itself.
  ~Process();

  // Waits for the process to end; its exit code, or Internal naming the signal that killed it.
  absl::StatusOr<int> Wait();

 private:
  Process(pid_t pid, std::string name) : pid_(pid), name_(std::move(name)) {}
  pid_t pid_ = -1;
  std::string name_;
};

// Whether `path` names an executable regular file.
bool IsExecutableFile(const std::string& path);

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_SUBPROCESS_H_
