#include "magi/calibration/cuda_timing.h"

#include <ATen/detail/CUDAHooksInterface.h>

#ifdef MAGI_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/backend/common/fused_adamw.h"
#include "magi/backend/common/fused_adamw_operands.h"
#include "magi/compat/torch_status.h"
#endif

namespace magi::calibration {

void Synchronize(const at::Device& device) {
  if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.index());
}

void ClearDeviceError(const at::Device& device) {
#ifdef MAGI_WITH_CUDA
  if (device.is_cuda()) cudaGetLastError();
#else
  (void)device;
#endif
}

#ifdef MAGI_WITH_CUDA

bool TimedOnDevice(const at::Device& device) { return device.is_cuda(); }

absl::StatusOr<Timing> TimeOnCuda(const at::Device& device, const RunBudget& budget,
                                  const std::function<absl::Status()>& run) {
  // Warm-up (first-call allocations, lazy initialization, the check of the op); then
  // one more run says how long the host takes to queue a warm one.
  if (absl::Status warm = run(); !warm.ok()) return warm;
  Synchronize(device);
  auto host_start = Clock::now();
  if (absl::Status warm = run(); !warm.ok()) return warm;
  const double host_seconds = SecondsSince(host_start);
  Synchronize(device);
  // The spin covers the host's queueing several times over: at least 100 us at 2 GHz,
  // at most ~2 ms (an op whose host side takes longer is timed with gaps, as it runs).
  const int64_t spin_cycles = std::clamp<int64_t>(static_cast<int64_t>(host_seconds * 4e9), 200000, 4000000);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
  cudaEvent_t begin = nullptr, end = nullptr;
  if (cudaEventCreate(&begin) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess) {
    if (begin != nullptr) cudaEventDestroy(begin);
    cudaGetLastError();
    return absl::InternalError("cannot create CUDA events");
  }
  auto cuda_check = [](cudaError_t error, absl::string_view what) {
    return error == cudaSuccess ? absl::OkStatus()
                                : absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
  };
  std::vector<double> samples;
  absl::Status failed;
  auto budget_start = Clock::now();
  absl::Status thrown = compat::CallTorch("", [&] {
    while (static_cast<int>(samples.size()) < budget.max_runs &&
           (static_cast<int>(samples.size()) < budget.min_runs || SecondsSince(budget_start) < budget.seconds)) {
      at::cuda::sleep(spin_cycles);
      if (failed = cuda_check(cudaEventRecord(begin, stream), "cudaEventRecord"); !failed.ok()) break;
      if (failed = run(); !failed.ok()) break;
      if (failed = cuda_check(cudaEventRecord(end, stream), "cudaEventRecord"); !failed.ok()) break;
      if (failed = cuda_check(cudaEventSynchronize(end), "cudaEventSynchronize"); !failed.ok()) break;
      float ms = 0;
      if (failed = cuda_check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime"); !failed.ok()) break;
      samples.push_back(static_cast<double>(ms) * 1e-3);
    }
  });
  if (!thrown.ok()) failed = thrown;
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  if (!failed.ok()) {
    cudaGetLastError();  // the failure is this kernel's: later launches must not see it
    return failed;
  }
  return Timing{Mean(samples), static_cast<int>(samples.size())};
}

std::optional<absl::Status> RunFusedAdamWOnCuda(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
  std::vector<at::Tensor> o;
  for (int s : plan.args[0].slots) o.push_back(slots[s]);
  const bool split = plan.adamw_split;
  std::vector<at::Tensor> state;
  for (int k : AdamWStateOperands(*plan.node)) state.push_back(o[k]);
  for (int k = 0; k < static_cast<int>(o.size()); ++k) {
    if (!o[k].is_cuda() || o[k].scalar_type() != FusedAdamWOperandType(split, k, /*bf16_grad=*/false) ||
        !o[k].is_contiguous()) {
      return std::nullopt;  // not what the fused kernel takes: the op-by-op update
    }
  }
  cuda::AdamWTensor tensor = FusedAdamWTensorOf(split, o, state);
  cudaError_t error = cuda::LaunchMultiTensorAdamW(&tensor, 1, FusedAdamWScalarsOf(split, o, plan.adamw),
                                                   at::cuda::getCurrentCUDAStream(o[0].get_device()).stream());
  if (error != cudaSuccess) return absl::InternalError(absl::StrCat("multi-tensor AdamW: ", cudaGetErrorString(error)));
  return absl::OkStatus();
}

std::optional<int64_t> PeakBytesOfRunOnCuda(const at::Device& device, const std::function<bool()>& run) {
  if (!device.is_cuda()) return std::nullopt;
  Synchronize(device);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
  if (!run()) return -1;  // the results are freed here; their bytes are in the peak
  Synchronize(device);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak - before;
}

std::string CudaDeviceName(const at::Device& device) {
  return at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
}

#else  // no CUDA in this build

bool TimedOnDevice(const at::Device&) { return false; }

absl::StatusOr<Timing> TimeOnCuda(const at::Device&, const RunBudget&, const std::function<absl::Status()>&) {
  return absl::UnimplementedError("this build has no CUDA");
}

std::optional<absl::Status> RunFusedAdamWOnCuda(const NodePlan&, const std::vector<at::Tensor>&) {
  return std::nullopt;
}

std::optional<int64_t> PeakBytesOfRunOnCuda(const at::Device&, const std::function<bool()>&) { return std::nullopt; }

std::string CudaDeviceName(const at::Device&) { return "device"; }

#endif  // MAGI_WITH_CUDA

}  // namespace magi::calibration
