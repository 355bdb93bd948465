#include "magi/calibration/device_key.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "magi/calibration/cuda_timing.h"

namespace magi {
namespace {

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown cpu";
}

}  // namespace

std::string TorchDeviceKey(const at::Device& device) {
  if (device.is_cuda()) {
    // "device-timed": CUDA events behind a spin kernel, magi::adamw as the multi-tensor
    // kernel (magi/calibration/cuda_timing.h); tables timed host-side before that are not
    // reused.
    return absl::StrCat("cuda ", calibration::CudaDeviceName(device), ", libtorch ", TORCH_VERSION, ", device-timed");
  }
  const int threads = at::get_num_threads();
  return absl::StrCat("cpu ", CpuModel(), ", ", threads, threads == 1 ? " thread" : " threads", ", libtorch ",
                      TORCH_VERSION);
}

}  // namespace magi
