// On the GPU machine: the meter reads device 0 through NVML, and its energy counter grows
// while the GPU works.
#include <cuda_runtime_api.h>

#include <chrono>

#include "gtest/gtest.h"
#include "magi/runtime/nvml/gpu_energy.h"

namespace magi {
namespace {

TEST(GpuEnergyMeterGpuTest, EnergyGrowsWhileTheGpuWorks) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  char bus_id[32] = {};
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), 0), cudaSuccess);
  absl::StatusOr<std::unique_ptr<GpuEnergyMeter>> meter = GpuEnergyMeter::Open(bus_id);
  ASSERT_TRUE(meter.ok()) << meter.status();
  absl::StatusOr<double> limit = (*meter)->PowerLimitWatts();
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_GT(*limit, 50.0);
  EXPECT_LT(*limit, 2000.0);
  absl::StatusOr<double> before = (*meter)->TotalJoules();
  ASSERT_TRUE(before.ok()) << before.status();
  // ~0.5 s of memsets over 1 GiB: the counter (updated every few ms) must move.
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, size_t{1} << 30), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500)) {
    for (int i = 0; i < 20; ++i) ASSERT_EQ(cudaMemsetAsync(buffer, i, size_t{1} << 30), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  absl::StatusOr<double> after = (*meter)->TotalJoules();
  ASSERT_TRUE(after.ok()) << after.status();
  // At least 10 W over the half second (an idle H200 draws ~80 W), at most the limit.
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(*after - *before, 10.0 * 0.5);
  EXPECT_LT(*after - *before, *limit * (seconds + 0.1) * 1.2);
  cudaFree(buffer);
}

}  // namespace
}  // namespace magi
