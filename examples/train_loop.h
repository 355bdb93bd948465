// examples:train's step loop: runs the trainer's steps, times them (StepMeter, TimedEnergy),
// averages each step's loss over the ranks, compares it with the eager reference, commits
// checkpoints every N steps, traces the last step when asked, and shows the progress line
// on rank 0. Then SummaryOf gathers what the trainer and the loop know into summary.json's
// members.
//
//   magi::examples::TrainLoop loop(options);
//   absl::Status ran = loop.Run(*trainer, *all_ranks, local_batch, global_batch, reference.get(), save);
//   magi::examples::Summary summary = loop.SummaryOf(*trainer);
#ifndef MAGI_EXAMPLES_TRAIN_LOOP_H_
#define MAGI_EXAMPLES_TRAIN_LOOP_H_

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "examples/eager_reference.h"
#include "examples/step_meter.h"
#include "examples/train_report.h"
#include "magi/comm/communicator.h"
#include "magi/cost/calibration.h"
#include "magi/frontend/fsdp/trainer.h"

namespace magi::examples {

struct TrainLoopOptions {
  int rank = 0;
  torch::Device device = torch::kCPU;
  int first_step = 0;  // steps first_step .. steps - 1 run (0-based)
  int steps = 0;
  int untimed_steps = 1;        // left out of the timing (compilation, warm-up, CUDA graph capture)
  int64_t tokens_per_step = 0;  // every rank's
  int checkpoint_every = 0;     // > 0: `save` after every N-th step but the last
  std::string trace;            // rank 0: the last step's timeline (TraceNextStep)
  std::string kernel_trace;     // rank 0: the last step's Kineto trace (that step is not timed)
  bool calibrate = false;       // record the timed steps' op times (calibration())
  double clip_grad_norm = 0;    // the eager reference's
};

class TrainLoop {
 public:
  explicit TrainLoop(TrainLoopOptions options) : options_(std::move(options)) {}

  // Runs the steps. `local_batch(step)` is this rank's batch, `global_batch(step)` the
  // global one (read only with a `reference`; may be null), `save` commits a checkpoint
  // (collective; null: none).
  absl::Status Run(FsdpTrainer& trainer, Communicator& all_ranks,
                   const std::function<std::vector<at::Tensor>(int)>& local_batch,
                   const std::function<std::vector<at::Tensor>(int)>& global_batch, EagerReference* reference,
                   const std::function<absl::Status()>& save);

  const LossCurve& curve() const { return curve_; }
  const std::vector<double>& losses() const { return losses_; }  // the rank mean of every step run
  double seconds() const { return seconds_; }                    // the loop's wall time
  const TimedEnergy& energy() const { return energy_; }
  const CalibrationTable& calibration() const { return calibration_; }
  // summary.json's members that the trainer and the loop know (the caller adds the run's:
  // world size, model, dtype, backend, budget, compile time, resume, ...).
  Summary SummaryOf(const FsdpTrainer& trainer) const;

 private:
  TrainLoopOptions options_;
  LossCurve curve_;
  std::vector<double> losses_;
  double seconds_ = 0;
  StepMeter meter_;
  TimedEnergy energy_;
  CalibrationTable calibration_;
  double worst_eager_ = 0;
  bool eager_ = false;
};

// CompileReport's members that `trainer` knows: the step graph, calibration summary,
// pipeline, prediction, plan hash and collectives (the caller adds the model, world size,
// compile time, device profile, calibration and deterministic mode).
CompiledStep CompiledStepOf(const FsdpTrainer& trainer);

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_LOOP_H_
