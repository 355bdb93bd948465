#include "examples/step_meter.h"

#include <algorithm>
#include <cstdio>

#ifdef MAGI_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include "absl/strings/str_format.h"

namespace magi::examples {

void StepMeter::BeforeSteps(const torch::Device& device) {
#ifdef MAGI_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

void StepMeter::Record(double seconds, const RunStats& run, bool timed, const torch::Device& device) {
  peak_bytes_ = std::max(peak_bytes_, run.peak_live_bytes);
#ifdef MAGI_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    allocator_peak_bytes_ = std::max<int64_t>(allocator_peak_bytes_, stats.allocated_bytes[0].peak);
  }
#else
  (void)device;
#endif
  if (!timed) return;
  step_seconds_sum_ += seconds;
  timed_step_seconds_.push_back(seconds);
  host_seconds_sum_ += run.host_seconds;
}

void TimedEnergy::Open(int cuda_device) {
#ifdef MAGI_WITH_CUDA
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "magi: GPU energy not measured: no PCI bus id for CUDA device %d\n", cuda_device);
    return;
  }
  absl::StatusOr<std::unique_ptr<GpuEnergyMeter>> meter = GpuEnergyMeter::Open(bus_id);
  absl::StatusOr<double> limit = meter.ok() ? (*meter)->PowerLimitWatts() : meter.status();
  if (!limit.ok()) {
    std::fprintf(stderr, "magi: GPU energy not measured: %s\n", std::string(limit.status().message()).c_str());
    return;
  }
  meter_ = *std::move(meter);
  limit_watts_ = *limit;
#else
  (void)cuda_device;
#endif
}

void TimedEnergy::BeforeTimedStep() {
  if (meter_ == nullptr || start_joules_ >= 0) return;
  start_joules_ = Read();
  start_time_ = std::chrono::steady_clock::now();
}

void TimedEnergy::EndWindow() {
  if (meter_ == nullptr || start_joules_ < 0 || end_joules_ >= 0) return;
  end_joules_ = Read();
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
}

std::string TimedEnergy::SummaryJson() const {
  const bool ok = measured() && seconds_ > 0;
  const double joules = ok ? end_joules_ - start_joules_ : -1;
  return absl::StrFormat(
      "\"gpu_joules_per_step\": %.3f, \"gpu_window_seconds\": %.4f, \"gpu_average_watts\": %.1f, "
      "\"gpu_power_limit_watts\": %.1f",
      ok ? joules / steps_ : -1.0, ok ? seconds_ : -1.0, ok ? joules / seconds_ : -1.0, ok ? limit_watts_ : -1.0);
}

double TimedEnergy::Read() {
  absl::StatusOr<double> joules = meter_->TotalJoules();
  if (joules.ok()) return *joules;
  std::fprintf(stderr, "magi: GPU energy not measured: %s\n", std::string(joules.status().message()).c_str());
  meter_.reset();
  return -1;
}

}  // namespace magi::examples
