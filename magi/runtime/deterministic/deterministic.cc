#include "magi/runtime/deterministic/deterministic.h"

#include <ATen/Parallel.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/compat/deterministic.h"

namespace magi {
namespace {

bool Accepts(const PinnedEnv& pin, const std::string& value) {
  if (value == pin.value) return true;
  for (const std::string& accepted : pin.accepted) {
    if (accepted == "*" || accepted == value) return true;
  }
  return false;
}

// Sets `pin` if unset; FailedPrecondition if set to a value it does not accept.
absl::Status Apply(const PinnedEnv& pin) {
  const char* current = std::getenv(pin.name);
  if (current == nullptr || *current == '\0') {
    if (::setenv(pin.name, pin.value, /*overwrite=*/1) != 0) {
      return absl::InternalError(absl::StrCat("deterministic mode: cannot set ", pin.name));
    }
    return absl::OkStatus();
  }
  if (Accepts(pin, current)) return absl::OkStatus();
  std::vector<std::string> allowed = {pin.value};
  allowed.insert(allowed.end(), pin.accepted.begin(), pin.accepted.end());
  return absl::FailedPreconditionError(absl::StrCat("deterministic mode needs ", pin.name, "=",
                                                    absl::StrJoin(allowed, " or "), " (", pin.why,
                                                    "), but the environment has ", pin.name, "=", current));
}

}  // namespace

const std::vector<PinnedEnv>& DeterministicEnvironment() {
  static const auto* pins = new std::vector<PinnedEnv>{
      {"CUBLAS_WORKSPACE_CONFIG", ":4096:8", {":16:8"},
       "cuBLAS reduces in a fixed order only with a fixed workspace configuration"},
      {"NCCL_ALGO", "Ring", {"ring"}, "one reduction order whatever the message size"},
      {"NCCL_PROTO", "Simple", {"simple"}, "one protocol whatever the message size"},
      {"NCCL_NVLS_ENABLE", "0", {}, "no reductions inside NVLink switches, no NVLink multicast"},
      {"NCCL_COLLNET_ENABLE", "0", {}, "no reductions inside network switches"},
      {"PYTORCH_TUNABLEOP_ENABLED", "0", {}, "no GEMM autotuning"},
      {"TORCHINDUCTOR_MAX_AUTOTUNE", "0", {}, "no Inductor autotuning"},
      {"TORCHINDUCTOR_MAX_AUTOTUNE_GEMM", "0", {}, "no Inductor GEMM autotuning"},
      {"TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE", "0", {}, "no Inductor pointwise autotuning"},
      {"MKL_CBWR", "AUTO", {"*"}, "MKL's conditional numerical reproducibility"},
  };
  return *pins;
}

absl::StatusOr<std::string> EnableDeterministicMode() {
  for (const PinnedEnv& pin : DeterministicEnvironment()) {
    if (absl::Status applied = Apply(pin); !applied.ok()) return applied;
  }
  // MAGI_FILL_UNINITIALIZED=all: LibTorch's fill of every allocation stays on (a check,
  // magi/compat/deterministic.h); unset or "empty": only what a step can read unwritten.
  const char* fill = std::getenv("MAGI_FILL_UNINITIALIZED");
  const std::string fill_mode = fill == nullptr ? "" : fill;
  if (fill_mode != "" && fill_mode != "empty" && fill_mode != "all") {
    return absl::InvalidArgumentError(absl::StrCat("MAGI_FILL_UNINITIALIZED is empty or all, not '", fill_mode, "'"));
  }
  compat::SetDeterministicAlgorithms(true, /*fill_every_allocation=*/fill_mode == "all");
  return DescribeDeterministicMode();
}

absl::Status PinNcclForDeterminism() {
  for (const PinnedEnv& pin : DeterministicEnvironment()) {
    if (!absl::StartsWith(pin.name, "NCCL_")) continue;
    if (absl::Status applied = Apply(pin); !applied.ok()) return applied;
  }
  return absl::OkStatus();
}

std::string DescribeDeterministicMode() {
  std::vector<std::string> env;
  for (const PinnedEnv& pin : DeterministicEnvironment()) {
    const char* current = std::getenv(pin.name);
    env.push_back(absl::StrCat(pin.name, "=", current == nullptr ? "(unset)" : current));
  }
  return absl::StrCat(compat::DescribeDeterministicAlgorithms(), "; intra-op threads ", at::get_num_threads(), "; ",
                      absl::StrJoin(env, " "));
}

}  // namespace magi
