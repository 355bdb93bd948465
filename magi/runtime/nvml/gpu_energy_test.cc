// Without a GPU: the meter says why it cannot open (no NVML here, or no GPU at a bus id that
// cannot exist); gpu_energy_gpu_test reads a real GPU on the GPU machine.
#include "magi/runtime/nvml/gpu_energy.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(GpuEnergyMeterTest, RefusesClearlyWhereItCannotMeasure) {
  absl::StatusOr<std::unique_ptr<GpuEnergyMeter>> meter = GpuEnergyMeter::Open("ffff:ff:ff.7");
  ASSERT_FALSE(meter.ok());
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    EXPECT_EQ(meter.status().code(), absl::StatusCode::kUnavailable) << meter.status();
    EXPECT_NE(meter.status().message().find("libnvidia-ml.so.1"), std::string::npos) << meter.status();
  } else {
    dlclose(nvml);
    // A driver is there (the GPU machine): no GPU sits at that bus id, or NVML cannot start.
    EXPECT_NE(meter.status().message().find("NVML"), std::string::npos) << meter.status();
  }
}

}  // namespace
}  // namespace magi
