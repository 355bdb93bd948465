// CUDA timing of kernels: each run timed by CUDA events on the device, behind a spin
// kernel that keeps the host's dispatch out of the time (the kernels' time as a CUDA graph
// replays them), magi::adamw as the multi-tensor kernel nccl_stream runs it with, and a
// partition's memory as the caching allocator's peak. Also the device waits and error
// clearing that the other parts call on any device.
//
//   if (TimedOnDevice(device)) {
//     absl::StatusOr<Timing> timing = TimeOnCuda(device, {min_runs, max_runs, seconds}, run);
//     if (!timing.ok()) ...  // unmeasurable: the status says why
//   }
//
// Only a build with CUDA (--config=cuda: MAGI_WITH_CUDA) times on the device; elsewhere
// TimedOnDevice is false, RunFusedAdamWOnCuda and PeakBytesOfRunOnCuda return nullopt, and
// a CUDA tensor's kernels are timed from synchronization to synchronization.
#ifndef MAGI_CALIBRATION_CUDA_TIMING_H_
#define MAGI_CALIBRATION_CUDA_TIMING_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/backend/common/step_plan.h"
#include "magi/calibration/kernel_timing.h"

namespace magi::calibration {

// Waits for `device`'s work (nothing to wait for on the CPU).
void Synchronize(const at::Device& device);

// Clears the CUDA runtime's last error after a kernel's failure, so that later launches do
// not see it (nothing on the CPU or without CUDA).
void ClearDeviceError(const at::Device& device);

// Whether kernels on `device` are timed by TimeOnCuda (a CUDA device in a CUDA build).
bool TimedOnDevice(const at::Device& device);

// How many runs a kernel gets: at least min_runs, then more while `seconds` last, at most
// max_runs.
struct RunBudget {
  int min_runs = 3;
  int max_runs = 30;
  double seconds = 0.004;
};

// The mean device time of `run` (one run of a kernel's launches on the current stream,
// checked) after a warm-up run. Each sample first queues a spin kernel (at::cuda::sleep)
// long enough for the host to queue the start event, the op's kernels and the end event
// behind it, so the events time the kernels, not the host's dispatch and launch latency
// (timing from synchronization to synchronization counted ~10 us of that per op, more than
// many of a step's kernels take). An error: the kernel cannot be timed, and why (the CUDA
// error is cleared). Requires TimedOnDevice(device).
absl::StatusOr<Timing> TimeOnCuda(const at::Device& device, const RunBudget& budget,
                                  const std::function<absl::Status()>& run);

// magi::adamw (either form) on the device as nccl_stream runs it: the multi-tensor kernel,
// in place over `slots` (the calibrator's own synthesized tensors). nullopt when that
// kernel does not apply (no CUDA build, or operands it does not take: the caller runs the
// op-by-op reference update instead).
std::optional<absl::Status> RunFusedAdamWOnCuda(const NodePlan& plan, const std::vector<at::Tensor>& slots);

// The caching allocator's peak over one `run` beyond what was allocated before it (all of
// a partition's buffers, whichever code allocates them; its results included: they are
// freed by then). -1 if `run` returns false. nullopt unless TimedOnDevice(device).
std::optional<int64_t> PeakBytesOfRunOnCuda(const at::Device& device, const std::function<bool()>& run);

// The CUDA device's name ("device" in a build without CUDA).
std::string CudaDeviceName(const at::Device& device);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_CUDA_TIMING_H_
