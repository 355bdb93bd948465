#include "magi/runtime/distributed/rendezvous.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/compat/torch_status.h"

namespace magi {
namespace {

const char* Get(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

absl::Status ReadInt(const char* name, int* out, int min_value) {
  const char* text = Get(name);
  if (text == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtoi(text, out) || *out < min_value) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", text,
                                                   "' is not an integer >= ", min_value));
  }
  return absl::OkStatus();
}

absl::Status ReadSlurm(DistributedEnv& env) {
  env.source = "slurm";
  if (Get("SLURM_NTASKS") == nullptr) {
    return absl::InvalidArgumentError("SLURM_PROCID is set but SLURM_NTASKS is not (run the workers with srun)");
  }
  absl::Status status = ReadInt("SLURM_PROCID", &env.rank, 0);
  if (status.ok()) status = ReadInt("SLURM_NTASKS", &env.world_size, 1);
  if (status.ok()) status = ReadInt("SLURM_LOCALID", &env.local_rank, 0);
  if (!status.ok()) return status;
  if (const char* addr = Get("MASTER_ADDR")) {
    env.master_addr = addr;
  } else {
    const char* variable = Get("SLURM_JOB_NODELIST") != nullptr ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    const char* list = Get(variable);
    if (list == nullptr) {
      return absl::InvalidArgumentError("SLURM_PROCID is set but neither MASTER_ADDR nor SLURM_JOB_NODELIST is");
    }
    absl::StatusOr<std::string> first = FirstHostOfSlurmNodeList(list);
    if (!first.ok()) return absl::InvalidArgumentError(absl::StrCat(variable, ": ", first.status().message()));
    env.master_addr = *first;
  }
  if (Get("MASTER_PORT") != nullptr) return ReadInt("MASTER_PORT", &env.master_port, 1);
  if (const char* job = Get("SLURM_JOB_ID")) {
    std::string digits(job);
    if (digits.size() > 4) digits = digits.substr(digits.size() - 4);
    int tail = 0;
    if (!absl::SimpleAtoi(digits, &tail) || tail < 0) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_JOB_ID='", job, "' does not end in digits"));
    }
    env.master_port = 15000 + tail;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FirstHostOfSlurmNodeList(absl::string_view list) {
  std::string host;
  int depth = 0;
  bool in_first_alternative = true;  // inside brackets: before the first ',' or '-'
  for (char c : list) {
    if (depth == 0 && c == ',') break;  // the first host ends at a top-level comma
    if (c == '[') {
      if (depth++ > 0) return absl::InvalidArgumentError(absl::StrCat("nested '[' in host list '", list, "'"));
      in_first_alternative = true;
      continue;
    }
    if (c == ']') {
      if (depth-- == 0) return absl::InvalidArgumentError(absl::StrCat("unbalanced ']' in host list '", list, "'"));
      continue;
    }
    if (depth > 0) {
      if (c == ',' || c == '-') in_first_alternative = false;
      if (in_first_alternative) host.push_back(c);
      continue;
    }
    host.push_back(c);
  }
  if (depth != 0) return absl::InvalidArgumentError(absl::StrCat("unbalanced '[' in host list '", list, "'"));
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in host list '", list, "'"));
  return host;
}

absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment() {
  DistributedEnv env;
  if (Get("RANK") == nullptr && Get("SLURM_PROCID") != nullptr) {
    absl::Status status = ReadSlurm(env);
    if (!status.ok()) return status;
  } else {
    if (Get("RANK") != nullptr) env.source = "env";
    absl::Status status = ReadInt("RANK", &env.rank, 0);
    if (status.ok()) status = ReadInt("WORLD_SIZE", &env.world_size, 1);
    if (status.ok()) status = ReadInt("LOCAL_RANK", &env.local_rank, 0);
    if (status.ok()) status = ReadInt("MASTER_PORT", &env.master_port, 1);
    if (status.ok()) status = ReadInt("TORCHELASTIC_RESTART_COUNT", &env.restart_count, 0);
    if (!status.ok()) return status;
    if (const char* addr = Get("MASTER_ADDR")) env.master_addr = addr;
    if (const char* agent = Get("TORCHELASTIC_USE_AGENT_STORE")) {
      env.use_agent_store = absl::AsciiStrToLower(agent) == "true";
    }
  }
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(env.source == "slurm" ? "SLURM_PROCID=" : "RANK=", env.rank,
                                                   " is not below ",
                                                   env.source == "slurm" ? "SLURM_NTASKS=" : "WORLD_SIZE=",
                                                   env.world_size));
  }
  if (env.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("master port ", env.master_port, " is above 65535"));
  }
  return env;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const DistributedEnv& env,
                                                             std::chrono::milliseconds timeout) {
  if (env.source == "single" && env.world_size == 1) {
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::HashStore>());
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0 && !env.use_agent_store;
  options.numWorkers = env.world_size;
  options.waitWorkers = !env.use_agent_store;
  options.timeout = timeout;
  return compat::CallTorch(
      absl::StatusCode::kDeadlineExceeded,
      absl::StrCat("rank ", env.rank, ": rendezvous at ", env.master_addr, ":", env.master_port,
                   env.use_agent_store ? " (torchrun's agent store)" : "", " failed"),
      [&] {
        auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
        if (!env.use_agent_store) return c10::intrusive_ptr<c10d::Store>(store);
        return c10::intrusive_ptr<c10d::Store>(
            c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("/worker/attempt_", env.restart_count), store));
      });
}

}  // namespace magi
