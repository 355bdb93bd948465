// The energy and power limit of one NVIDIA GPU, read through NVML, for benchmarks.
//
// Why: a training step that runs at the GPU's power cap takes as long as its energy allows
// (docs/benchmarks.md, the 953M step on one H200), so joules per step, not only seconds, say whether a
// change helped. NVML's total energy counter (millijoules since the driver loaded; Volta and
// later) is updated every few tens of milliseconds, so read it around many steps, not one,
// and not between steps: each read costs host time during which the GPU idles, and idle time
// lets a power-capped GPU run the next steps faster (examples:train reads it twice a run).
//
// NVML is loaded at run time (dlopen of the driver's libnvidia-ml.so.1): nothing links it,
// and on a machine without an NVIDIA driver Open returns Unavailable naming the library.
// Not thread-safe; one meter per process is enough (NVML counts its own initializations).
#ifndef MAGI_RUNTIME_NVML_GPU_ENERGY_H_
#define MAGI_RUNTIME_NVML_GPU_ENERGY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace magi {

class GpuEnergyMeter {
 public:
  // The GPU at `pci_bus_id` (as cudaDeviceGetPCIBusId writes it, e.g. "0000:19:00.0", which
  // does not depend on CUDA_VISIBLE_DEVICES).
  static absl::StatusOr<std::unique_ptr<GpuEnergyMeter>> Open(const std::string& pci_bus_id);
  ~GpuEnergyMeter();
  GpuEnergyMeter(const GpuEnergyMeter&) = delete;
  GpuEnergyMeter& operator=(const GpuEnergyMeter&) = delete;

  // Joules used since the driver loaded (NVML's counter is in millijoules).
  absl::StatusOr<double> TotalJoules() const;
  // The power limit the GPU enforces now, in watts.
  absl::StatusOr<double> PowerLimitWatts() const;

 private:
  struct Library;
  GpuEnergyMeter(std::unique_ptr<Library> library, void* device);
  std::unique_ptr<Library> library_;
  void* device_;  // nvmlDevice_t
};

}  // namespace magi

#endif  // MAGI_RUNTIME_NVML_GPU_ENERGY_H_
