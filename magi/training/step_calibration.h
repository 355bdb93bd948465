// How the FSDP front ends (FsdpTrainer, FxTrainer) turn their `calibration` setting into
// the compiler's cost-model options: calibration by default.
//
//   "auto"  (the default) the step's kernels are measured where the cache
//           (${MAGI_CACHE_DIR:-~/.cache/magi}/calibration/) lacks them, with micro-runs
//           on every rank (collectives through `communicators`, in lockstep), and cached;
//   "none"  the device profile's formulas alone;
//   PATH    a CalibrationTable CSV (examples:train --calibration_out writes one), as given.
#ifndef MAGI_TRAINING_STEP_CALIBRATION_H_
#define MAGI_TRAINING_STEP_CALIBRATION_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "magi/backend/torch_executable.h"
#include "magi/comm/communicator.h"
#include "magi/compiler/compile_options.h"
#include "magi/compiler/step_time_feedback.h"
#include "magi/ir/graph.h"

namespace magi {

// Sets `cost_model.calibration_csv` or `.calibrator` from `calibration` (see above).
// `communicators` by process-group name; `device` is where the step runs. Progress is
// shown on stderr by the rank that is rank 0 of every communicator. InvalidArgument for
// an empty setting.
absl::Status SetStepCalibration(const std::string& calibration,
                                const std::map<std::string, std::shared_ptr<Communicator>>& communicators,
                                const at::Device& device, CostModelOptions& cost_model);

// Calibration from the steps (magi/compiler/step_time_feedback.h) for a front end's step
// executable: with calibration by default on CPU, runs 3-66 are profiled and their node
// times folded into the device's ".steps.csv" cache (written after 8, 16, 32 and 64 of
// them, and when the recorder goes), which the next compile prefers to micro-runs. Front ends call BeforeRun/AfterRun
// around every run of the step.
class StepTimeRecorder {
 public:
  // Null unless `cost_model` calibrates by default (SetStepCalibration "auto") and the
  // step runs on the CPU, where the interpreter's node times are the nodes' durations.
  static std::unique_ptr<StepTimeRecorder> Create(const CostModelOptions& cost_model, const at::Device& device);
  // Writes the runs recorded since the last write (StepTimeFeedback::Flush); a failure is
  // a warning on stderr (nothing else can report it here).
  ~StepTimeRecorder();

  // Turns node profiling on for a run to record (and keeps it on where the caller asked,
  // `profile_requested`).
  void BeforeRun(TorchExecutable& executable, bool profile_requested);
  // After a successful run: records it when wanted. A cache that cannot be written is
  // not the step's failure: note() says so.
  void AfterRun(const TorchExecutable& executable, const Graph& graph);
  // Writes the runs recorded since the last write (a run between saving points keeps all
  // its steps) and returns note().
  const std::string& Finish();
  // "" until the file is written (or fails to be): then one line for the user.
  const std::string& note() const { return note_; }

 private:
  explicit StepTimeRecorder(std::unique_ptr<StepTimeFeedback> feedback) : feedback_(std::move(feedback)) {}
  std::unique_ptr<StepTimeFeedback> feedback_;
  int64_t runs_ = 0;
  bool recording_ = false;
  std::string note_;
};

}  // namespace magi

#endif  // MAGI_TRAINING_STEP_CALIBRATION_H_
