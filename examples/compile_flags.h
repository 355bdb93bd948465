// The compile options every example takes, as one set of flags: how the captured graph is
// optimized (--passes or --memory_budget_gb), partitioned (--partition_backends, ...), run
// (--backend), costed (--device_profile, --calibration) and pinned (--deterministic,
// --plan_hash). examples:train, :train_vision and :generate link this library, so a flag
// means the same in each, and every frontend (FsdpTrainer, FxTrainer, FsdpInference) takes
// the one CompileOptions they make, plus the calibration setting, which is the frontend's.
//
//   absl::Status valid = magi::ValidateCompileFlags();             // before any process starts
//   magi::CompileOptions compile = magi::CompileOptionsFromFlags("cuda");
//   training.calibration = magi::CalibrationFromFlags();
#ifndef MAGI_EXAMPLES_COMPILE_FLAGS_H_
#define MAGI_EXAMPLES_COMPILE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "magi/compiler/compile_options.h"

ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, passes);
ABSL_DECLARE_FLAG(double, memory_budget_gb);
ABSL_DECLARE_FLAG(double, budget_gb);  // deprecated: --memory_budget_gb
ABSL_DECLARE_FLAG(std::string, device_profile);
ABSL_DECLARE_FLAG(std::string, calibration);
ABSL_DECLARE_FLAG(std::string, partition_backends);
ABSL_DECLARE_FLAG(int, partition_min_nodes);
ABSL_DECLARE_FLAG(int, partition_max_nodes);
ABSL_DECLARE_FLAG(bool, partition_align_collectives);
ABSL_DECLARE_FLAG(bool, partition_recompute_fusible);
ABSL_DECLARE_FLAG(bool, deterministic);
ABSL_DECLARE_FLAG(std::string, plan_hash);

namespace magi {

// InvalidArgument naming the flag: a NaN, infinite, negative or too large
// --memory_budget_gb, both --memory_budget_gb and its deprecated alias --budget_gb,
// --partition_min_nodes < 1, --partition_max_nodes < 0, --passes together with a memory
// budget, an unbalanced brace in --partition_backends, or an empty --calibration.
absl::Status ValidateCompileFlags();

// "inductor{jobs=4},elementwise" -> {"inductor{jobs=4}", "elementwise"}: commas inside a
// spec's braces separate its options, not specs.
std::vector<std::string> SplitBackendSpecs(const std::string& specs);

// The memory budget in bytes (--memory_budget_gb, or the deprecated --budget_gb; 0: none).
// Call ValidateCompileFlags first.
int64_t MemoryBudgetBytesFromFlags();

// The flags above as the compiler's CompileOptions: every flag but --calibration, which is
// the frontend's own setting (TrainingOptions, FxTrainOptions, InferenceOptions::calibration:
// CalibrationFromFlags). `device` ("cpu" or "cuda") picks --device_profile's default: cpu,
// or h200. Call ValidateCompileFlags first.
CompileOptions CompileOptionsFromFlags(const std::string& device);

// --calibration: auto, none or a CalibrationTable CSV path.
std::string CalibrationFromFlags();

}  // namespace magi

#endif  // MAGI_EXAMPLES_COMPILE_FLAGS_H_
