#include "magi/runtime/distributed/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace magi {

std::optional<int> RunLocalWorkersIfLauncher(int world_size, int argc, char** argv) {
  // Under srun every task is already a rank (SLURM_PROCID; rendezvous.h reads it):
  // launching copies there would start a separate job per task.
  if (std::getenv("RANK") != nullptr || std::getenv("SLURM_PROCID") != nullptr || world_size <= 1) {
    return std::nullopt;
  }
  std::vector<std::string> child_argv(argv, argv + argc);
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) child_argv[0] = std::string(self, static_cast<size_t>(n));
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(world_size, child_argv);
  if (!result.ok()) {
    std::fprintf(stderr, "magi: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (result->exit_code != 0) {
    std::fprintf(stderr, "magi: rank %d failed with exit code %d; all ranks stopped\n", result->failed_rank,
                 result->exit_code);
  }
  return result->exit_code;
}

absl::StatusOr<int> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int error = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free port: ", std::strerror(error)));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// Starts `args[0]` with `args` and `envp` as a child that dies with this thread: the
// kernel sends it SIGKILL when the launcher dies (PR_SET_PDEATHSIG), so a killed
// launcher never leaves workers training on their own. posix_spawn cannot set that,
// hence fork + exec; between them the child makes only async-signal-safe calls. An exec
// failure comes back through a close-on-exec pipe, so it is reported as before.
absl::StatusOr<pid_t> SpawnWorker(const std::vector<char*>& args, const std::vector<char*>& envp) {
  const pid_t launcher = ::getpid();
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) {
    int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(error)));
  }
  if (pid == 0) {
    ::close(report[0]);
    int error = 0;
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      error = errno;
    } else if (::getppid() != launcher) {
      // The launcher died before the death signal was armed: we were re-parented already.
      ::_exit(128 + SIGKILL);
    } else if (::signal(SIGPIPE, SIG_IGN) == SIG_ERR) {  // kept across exec
      // A write to a dead peer's socket then fails with EPIPE, which Gloo reports as an error
      // naming the collective, instead of killing this rank silently. Without it a surviving
      // rank could die of SIGPIPE (exit 141) within the same poll as the rank that really
      // failed and be reported as the failed one (seen under load).
      error = errno;
    } else {
      ::execve(args[0], args.data(), envp.data());
      error = errno;
    }
    ssize_t unused = ::write(report[1], &error, sizeof(error));
    (void)unused;
    ::_exit(127);
  }
  ::close(report[1]);
  int child_error = 0;
  ssize_t n = 0;
  do {
    n = ::read(report[0], &child_error, sizeof(child_error));
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n > 0) {  // exec (or prctl) failed; the child has exited
    ::waitpid(pid, nullptr, 0);
    return absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(child_error)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<LaunchResult> LaunchLocalWorkers(int world_size, const std::vector<std::string>& argv,
                                                const std::map<std::string, std::string>& extra_env,
                                                std::chrono::milliseconds grace) {
  if (world_size < 1) return absl::InvalidArgumentError("world_size must be >= 1");
  if (argv.empty()) return absl::InvalidArgumentError("no program to launch");
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) return port.status();

  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      size_t eq = entry.find('=');
      if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    for (const auto& [key, value] : extra_env) env[key] = value;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(*port);
    std::vector<std::string> env_strings;
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp, args;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (std::string& s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);
    absl::StatusOr<pid_t> pid = SpawnWorker(args, envp);
    if (!pid.ok()) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      return pid.status();
    }
    pids.push_back(*pid);
  }

  LaunchResult result;
  size_t running = pids.size();
  bool terminating = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point first_failure;
  while (running > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t rank = 0; rank < pids.size(); ++rank) {
        if (pids[rank] != pid) continue;
        pids[rank] = -1;
        --running;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && result.failed_rank < 0) {
          result.failed_rank = static_cast<int>(rank);
          result.exit_code = code;
        }
      }
      if (result.failed_rank >= 0 && !terminating) {
        terminating = true;
        first_failure = std::chrono::steady_clock::now();
        for (pid_t p : pids) {
          if (p > 0) ::kill(p, SIGTERM);
        }
        deadline = std::chrono::steady_clock::now() + grace;
      }
      continue;
    }
    if (terminating && std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (terminating) {
    result.stop_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_failure).count();
  }
  return result;
}

}  // namespace magi
