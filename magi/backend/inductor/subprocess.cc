#include "magi/backend/inductor/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace magi::inductor {

absl::StatusOr<Process> Process::Start(const std::vector<std::string>& argv,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       const std::string& stdout_path, const std::string& stderr_path) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  std::map<std::string, std::string> variables;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text = *entry;
    size_t eq = text.find('=');
    if (eq != std::string::npos) variables[text.substr(0, eq)] = text.substr(eq + 1);
  }
  for (const auto& [key, value] : env) variables[key] = value;
  std::vector<std::string> env_text;
  for (const auto& [key, value] : variables) env_text.push_back(key + "=" + value);
  std::vector<char*> envp, args;
  for (std::string& text : env_text) envp.push_back(text.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& arg : argv_copy) args.push_back(arg.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const int flags = O_WRONLY | O_CREAT | O_APPEND;  // no O_CLOEXEC: the child keeps them
  if (!stdout_path.empty()) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(), flags, 0644);
  if (!stderr_path.empty()) posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(), flags, 0644);
  pid_t pid = -1;
  int error = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return absl::NotFoundError(absl::StrCat("cannot run ", argv[0], ": ", strerror(error)));
  return Process(pid, argv[0]);
}

Process::~Process() {
  if (pid_ > 0) (void)Wait();
}

absl::StatusOr<int> Process::Wait() {
  if (pid_ <= 0) return absl::FailedPreconditionError(absl::StrCat(name_, " was already waited for"));
  int status = 0;
  pid_t done;
  do {
    done = waitpid(pid_, &status, 0);
  } while (done < 0 && errno == EINTR);
  pid_t pid = pid_;
  pid_ = -1;
  if (done < 0) return absl::InternalError(absl::StrCat("waiting for ", name_, " (pid ", pid, "): ", strerror(errno)));
  if (WIFSIGNALED(status)) {
    return absl::InternalError(absl::StrCat(name_, " (pid ", pid, ") was killed by signal ", WTERMSIG(status), " (",
                                            strsignal(WTERMSIG(status)), ")"));
  }
  return WEXITSTATUS(status);
}

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace magi::inductor
