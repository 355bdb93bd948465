// Deterministic mode's process-wide settings (docs/deterministic.md): what must be in
// place before any kernel runs, any cuBLAS handle exists or any communicator starts.
//
//   int main(int argc, char** argv) {
//     ...parse flags...
//     if (deterministic) {
//       absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();   // first
//       if (!settings.ok()) return Fail(settings.status());
//     }
//     ...CUDA, communicators, models, FsdpTrainer with CompileOptions::deterministic...
//
// What it sets, each for a reason:
//  - ATen's deterministic algorithms in error mode, cuDNN deterministic, cuDNN's
//    benchmark autotuner off (compat::SetDeterministicAlgorithms): an op without a
//    deterministic kernel then fails naming itself instead of varying silently; LibTorch's
//    fill of every allocation off, the executors filling what a step can read unwritten
//    (magi/compat/deterministic.h; MAGI_FILL_UNINITIALIZED=all keeps LibTorch's fill, as a
//    check that a run with it and one without agree bit for bit; any other value than
//    "all", "empty" or unset is InvalidArgument);
//  - environment variables, read by libraries when they initialize, so set before that
//    and inherited by the worker processes a launcher starts (DeterministicEnvironment()
//    lists them): CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS reads it when it creates a
//    handle); NCCL_ALGO=Ring, NCCL_PROTO=Simple, NCCL_NVLS_ENABLE=0,
//    NCCL_COLLNET_ENABLE=0 (read when the first communicator starts: one reduction order
//    whatever the message size, no reductions inside NVLink or network switches; never
//    NVLink multicast); no autotuning (PYTORCH_TUNABLEOP_ENABLED=0,
//    TORCHINDUCTOR_MAX_AUTOTUNE*=0 for Inductor/AOTInductor partitions compiled in a
//    child Python); MKL_CBWR=AUTO (MKL's conditional numerical reproducibility on CPUs).
// A variable that is already set is kept when its value keeps the contract
// (CUBLAS_WORKSPACE_CONFIG=:16:8, NCCL_ALGO=ring) and is FailedPrecondition naming it
// otherwise (NCCL_ALGO=Tree): the caller asked for two incompatible things.
// What it does NOT do: it cannot tell whether CUDA or NCCL were already initialized
// (call it first); it does not fix the intra-op thread count (part of the "same
// hardware" of the contract; the summary reports it); Gloo's allreduce is pinned to its
// ring algorithm by the Gloo communicator in every mode.
#ifndef MAGI_RUNTIME_DETERMINISTIC_DETERMINISTIC_H_
#define MAGI_RUNTIME_DETERMINISTIC_DETERMINISTIC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace magi {

// One environment variable deterministic mode pins.
struct PinnedEnv {
  const char* name;
  const char* value;                   // what is set when the variable is unset
  std::vector<std::string> accepted;  // values already set that are kept; empty: only `value`; "*": any
  const char* why;
};

// Every variable EnableDeterministicMode pins, in the order it applies them.
const std::vector<PinnedEnv>& DeterministicEnvironment();

// Applies the settings above to this process (and, through the environment, to the
// processes it starts). Returns DescribeDeterministicMode(); FailedPrecondition naming
// the variable when one is set to a value the contract does not accept (nothing after
// it is applied).
absl::StatusOr<std::string> EnableDeterministicMode();

// The NCCL variables alone (those starting with "NCCL_"), pinned the same way: the NCCL
// communicator calls it in deterministic mode before it creates a communicator.
absl::Status PinNcclForDeterminism();

// One line on what is in place: ATen's switches, the intra-op thread count and the
// pinned variables as the environment has them now.
std::string DescribeDeterministicMode();

}  // namespace magi

#endif  // MAGI_RUNTIME_DETERMINISTIC_DETERMINISTIC_H_
