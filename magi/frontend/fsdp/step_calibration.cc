#include "magi/frontend/fsdp/step_calibration.h"

#include "absl/strings/str_cat.h"
#include "magi/backend/interpreter/kernel_calibrator.h"

namespace magi {

absl::Status SetStepCalibration(const std::string& calibration,
                                const std::map<std::string, std::shared_ptr<Communicator>>& communicators,
                                const at::Device& device, CostModelOptions& cost_model) {
  if (calibration.empty()) {
    return absl::InvalidArgumentError("calibration: give auto, none or a calibration table (CSV) path");
  }
  cost_model.calibration_csv.clear();
  cost_model.calibrator = nullptr;
  if (calibration == "none") return absl::OkStatus();
  if (calibration != "auto") {
    cost_model.calibration_csv = calibration;
    return absl::OkStatus();
  }
  TorchKernelCalibratorOptions options;
  options.communicators = communicators;
  options.device = device;
  options.progress = true;
  for (const auto& [group, communicator] : communicators) {
    if (communicator != nullptr && communicator->rank() != 0) options.progress = false;
  }
  cost_model.calibrator = MakeTorchKernelCalibrator(options);
  return absl::OkStatus();
}

}  // namespace magi
