#include "magi/runtime/nvml/gpu_energy.h"

#include <dlfcn.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

// The few NVML entry points used, declared from NVML's documented C API (nvml.h is not part
// of the CUDA toolkit here): every call returns nvmlReturn_t, 0 being NVML_SUCCESS.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

}  // namespace

struct GpuEnergyMeter::Library {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;  // NOLINT(runtime/int): NVML's type
  NvmlReturn (*enforced_power_limit)(NvmlDevice, unsigned int*) = nullptr;
  bool initialized = false;

  ~Library() {
    if (initialized) shutdown();
    if (handle != nullptr) dlclose(handle);
  }

  absl::Status Check(NvmlReturn result, const char* what) const {
    if (result == kNvmlSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("NVML ", what, ": ", error_string(result), " (", result, ")"));
  }
};

absl::StatusOr<std::unique_ptr<GpuEnergyMeter>> GpuEnergyMeter::Open(const std::string& pci_bus_id) {
  auto library = std::make_unique<Library>();
  library->handle = dlopen(kNvmlLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library->handle == nullptr) {
    const char* reason = dlerror();
    return absl::UnavailableError(absl::StrCat("cannot load ", kNvmlLibrary, " (the NVIDIA driver's NVML): ",
                                               reason != nullptr ? reason : "unknown reason"));
  }
  struct Symbol {
    const char* name;
    void** slot;
  };
  const Symbol symbols[] = {
      {"nvmlInit_v2", reinterpret_cast<void**>(&library->init)},
      {"nvmlShutdown", reinterpret_cast<void**>(&library->shutdown)},
      {"nvmlErrorString", reinterpret_cast<void**>(&library->error_string)},
      {"nvmlDeviceGetHandleByPciBusId_v2", reinterpret_cast<void**>(&library->device_by_pci_bus_id)},
      {"nvmlDeviceGetTotalEnergyConsumption", reinterpret_cast<void**>(&library->total_energy)},
      {"nvmlDeviceGetEnforcedPowerLimit", reinterpret_cast<void**>(&library->enforced_power_limit)},
  };
  for (const Symbol& symbol : symbols) {
    *symbol.slot = dlsym(library->handle, symbol.name);
    if (*symbol.slot == nullptr) {
      return absl::UnavailableError(absl::StrCat(kNvmlLibrary, " has no ", symbol.name, " (driver too old)"));
    }
  }
  MAGI_RETURN_IF_ERROR(library->Check(library->init(), "init"));
  library->initialized = true;
  NvmlDevice device = nullptr;
  MAGI_RETURN_IF_ERROR(library->Check(library->device_by_pci_bus_id(pci_bus_id.c_str(), &device),
                                      absl::StrCat("no GPU at PCI bus id '", pci_bus_id, "'").c_str()));
  return std::unique_ptr<GpuEnergyMeter>(new GpuEnergyMeter(std::move(library), device));
}

GpuEnergyMeter::GpuEnergyMeter(std::unique_ptr<Library> library, void* device)
    : library_(std::move(library)), device_(device) {}

GpuEnergyMeter::~GpuEnergyMeter() = default;

absl::StatusOr<double> GpuEnergyMeter::TotalJoules() const {
  unsigned long long millijoules = 0;  // NOLINT(runtime/int): NVML's type
  MAGI_RETURN_IF_ERROR(library_->Check(library_->total_energy(device_, &millijoules), "total energy"));
  return static_cast<double>(millijoules) / 1e3;
}

absl::StatusOr<double> GpuEnergyMeter::PowerLimitWatts() const {
  unsigned int milliwatts = 0;
  MAGI_RETURN_IF_ERROR(library_->Check(library_->enforced_power_limit(device_, &milliwatts), "enforced power limit"));
  return milliwatts / 1e3;
}

}  // namespace magi
