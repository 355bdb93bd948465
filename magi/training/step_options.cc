#include "magi/training/step_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace magi {

absl::Status CheckTrainingCompileOptions(const CompileOptions& options, absl::string_view trainer) {
  auto refused = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(trainer, " does not take CompileOptions::", field, ": ", why));
  };
  if (options.sharding) return refused("sharding", "the trainer builds the FSDP plan itself");
  if (options.batch_invariant_sequences > 1) {
    return refused("batch_invariant_sequences", "batch-invariant unrolling is for inference (FsdpInference)");
  }
  if (options.optimization.weight_preparation) {
    return refused("optimization.weight_preparation",
                   "a training step changes its weights every step (inference only: FsdpInference)");
  }
  if (!options.cost_model.calibration_csv.empty()) {
    return refused("cost_model.calibration_csv",
                   absl::StrCat("give the table as the trainer's calibration setting (calibration = \"",
                                options.cost_model.calibration_csv, "\")"));
  }
  if (options.cost_model.calibrator != nullptr) {
    return refused("cost_model.calibrator", "the trainer makes its own from its calibration setting (\"auto\")");
  }
  return absl::OkStatus();
}

void AddSplitMasterWeights(CompileOptions& options) {
  std::string& canonicalize = options.optimization.canonicalize;
  canonicalize += canonicalize.empty() ? "split-master-weights" : ",split-master-weights";
}

double ScheduledLearningRate(const LrSchedule& schedule, double lr, int64_t step) {
  if (schedule.warmup_steps > 0 && step <= schedule.warmup_steps) {
    return lr * static_cast<double>(step) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.kind == LrSchedule::Kind::kConstant) return lr;
  const double span = static_cast<double>(std::max<int64_t>(1, schedule.total_steps - schedule.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - schedule.warmup_steps) / span);
  return schedule.min_lr + (lr - schedule.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  return absl::InvalidArgumentError(absl::StrCat("unknown learning-rate schedule '", name, "' (constant or cosine)"));
}

}  // namespace magi
