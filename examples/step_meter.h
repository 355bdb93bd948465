// What examples:train measures around its steps (rank 0's numbers in summary.json):
// StepMeter, the step times after the untimed warm-up steps, the executable's peak and host
// time, and on CUDA the caching allocator's peak; TimedEnergy, the energy rank 0's GPU used
// over the timed steps (NVML).
//
//   magi::examples::StepMeter meter;
//   meter.BeforeSteps(device);                 // resets the allocator's peak (CUDA)
//   ... run a step, device synchronized ...
//   meter.Record(seconds, trainer.last_run_stats(), timed, device);
//
// What it does not do: synchronize the device (the caller times completed steps).
#ifndef MAGI_EXAMPLES_STEP_METER_H_
#define MAGI_EXAMPLES_STEP_METER_H_

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "magi/backend/torch_executable.h"
#include "magi/runtime/nvml/gpu_energy.h"

namespace magi::examples {

class StepMeter {
 public:
  // Before the first step: the allocator's peak counts the training steps only (compilation
  // ran the step eagerly once before); the warm-up steps count, since a CUDA graph allocates
  // its memory while it is captured.
  void BeforeSteps(const torch::Device& device);
  // After a step (the device synchronized): its wall time counts when `timed`.
  void Record(double seconds, const RunStats& run, bool timed, const torch::Device& device);

  int timed_steps() const { return static_cast<int>(timed_step_seconds_.size()); }
  double mean_step_seconds() const { return timed_steps() > 0 ? step_seconds_sum_ / timed_steps() : 0.0; }
  double mean_host_seconds() const { return timed_steps() > 0 ? host_seconds_sum_ / timed_steps() : 0.0; }
  const std::vector<double>& timed_step_seconds() const { return timed_step_seconds_; }
  int64_t peak_bytes() const { return peak_bytes_; }  // the executable's (RunStats::peak_live_bytes)
  // On CUDA, the caching allocator's peak (what torch.cuda.max_memory_allocated reports for
  // PyTorch runs, so Magi's and PyTorch's numbers compare); -1 elsewhere.
  int64_t allocator_peak_bytes() const { return allocator_peak_bytes_; }

 private:
  double step_seconds_sum_ = 0, host_seconds_sum_ = 0;
  std::vector<double> timed_step_seconds_;
  int64_t peak_bytes_ = 0;
  int64_t allocator_peak_bytes_ = -1;
};

// The energy rank 0's GPU used over the timed steps (NVML; docs/benchmarks.md, the 953M step
// against FSDP2: at the power cap a step takes as long as its energy allows). NVML is read twice per run:
// before the first timed step and once the timed steps are over (EndWindow), never between
// steps, since each read leaves the GPU idle and idle time lets a power-capped GPU run the
// next steps faster. The window so includes the loop's work between the steps (the loss
// all-reduce and read, the next batch): its length is reported with it. Where NVML cannot
// be read it says why and reports -1.
class TimedEnergy {
 public:
  void Open(int cuda_device);
  // Before each timed step, the device synchronized: the first starts the window.
  void BeforeTimedStep();
  void AfterTimedStep() { ++steps_; }
  // Once the timed steps are over (before an untimed step after them, else after the loop).
  void EndWindow();
  bool measured() const { return steps_ > 0 && start_joules_ >= 0 && end_joules_ >= start_joules_; }
  // JSON members for the summary (-1 where nothing was measured).
  std::string SummaryJson() const;

 private:
  double Read();

  std::unique_ptr<GpuEnergyMeter> meter_;
  double limit_watts_ = -1, start_joules_ = -1, end_joules_ = -1, seconds_ = -1;
  int steps_ = 0;
  std::chrono::steady_clock::time_point start_time_;
};

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_STEP_METER_H_
