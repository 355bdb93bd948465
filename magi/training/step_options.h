// What every trainer (FsdpTrainer, FxTrainer) takes besides its model and its
// CompileOptions (magi/compiler/compile_options.h, taken as they are): AdamW's
// hyperparameters and the learning-rate schedule, and the check that refuses the
// CompileOptions fields no trainer takes.
//
//   MAGI_RETURN_IF_ERROR(CheckTrainingCompileOptions(compile, "FsdpTrainer"));
//   double lr = ScheduledLearningRate(schedule, adamw.lr, step);
//
// No LibTorch: the options are plain data.
#ifndef MAGI_TRAINING_STEP_OPTIONS_H_
#define MAGI_TRAINING_STEP_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/compiler/compile_options.h"

namespace magi {

// AdamW's hyperparameters (torch.optim.AdamW's defaults); lr is the base rate a schedule scales.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// The CompileOptions fields a trainer cannot take, refused (InvalidArgument naming the field
// and `trainer`) rather than ignored: `sharding` (the trainer builds the FSDP plan itself),
// `batch_invariant_sequences` and `optimization.weight_preparation` (inference only: a
// training step changes its weights every step), and `cost_model.calibration_csv` and
// `.calibrator` (set from the trainer's own `calibration` setting: SetStepCalibration).
// Every other field reaches the compiler as given.
absl::Status CheckTrainingCompileOptions(const CompileOptions& options, absl::string_view trainer);

// Split fp32 master weights (magi/passes/split_master_weights.h): adds the pass last in
// `options.optimization.canonicalize`, before the search and pipelines see the step, after
// the copies and dead code that could hide a parameter's uses are gone.
void AddSplitMasterWeights(CompileOptions& options);

// Learning rate by step (t = 1, 2, ...): linear warm-up lr * t / warmup_steps for
// t <= warmup_steps, then constant, or for kCosine
// min_lr + (lr - min_lr) * (1 + cos(pi * min(1, (t - warmup_steps) / (total_steps - warmup_steps)))) / 2.
struct LrSchedule {
  enum class Kind { kConstant, kCosine };
  Kind kind = Kind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // kCosine: the step where lr reaches min_lr (> warmup_steps)
  double min_lr = 0;
};
double ScheduledLearningRate(const LrSchedule& schedule, double lr, int64_t step);
// "constant" or "cosine"; InvalidArgument otherwise.
absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name);

}  // namespace magi

#endif  // MAGI_TRAINING_STEP_OPTIONS_H_
