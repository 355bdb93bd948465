#include "magi/training/step_calibration.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "magi/calibration/torch_kernel_calibrator.h"

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

std::unique_ptr<StepTimeRecorder> StepTimeRecorder::Create(const CostModelOptions& cost_model,
                                                           const at::Device& device) {
  if (cost_model.calibrator == nullptr || !device.is_cpu()) return nullptr;
  return std::unique_ptr<StepTimeRecorder>(new StepTimeRecorder(
      std::make_unique<StepTimeFeedback>(cost_model.calibration_cache_dir, cost_model.calibrator->DeviceKey())));
}

StepTimeRecorder::~StepTimeRecorder() {
  if (absl::Status flushed = feedback_->Flush(); !flushed.ok()) {
    std::fprintf(stderr, "magi: warning: calibration from the steps: the last steps not saved: %s\n",
                 std::string(flushed.message()).c_str());
  }
}

const std::string& StepTimeRecorder::Finish() {
  if (feedback_->failed()) return note_;  // the warning AfterRun wrote stays
  if (absl::Status flushed = feedback_->Flush(); !flushed.ok()) {
    note_ = absl::StrCat("warning: calibration from the steps not saved: ", flushed.message());
  } else if (feedback_->saved()) {
    note_ = feedback_->summary();
  }
  return note_;
}

void StepTimeRecorder::BeforeRun(TorchExecutable& executable, bool profile_requested) {
  ++runs_;
  const bool was_recording = recording_;
  recording_ = feedback_->Wants(runs_);
  if (recording_ || was_recording) executable.set_profile_nodes(profile_requested || recording_);
}

void StepTimeRecorder::AfterRun(const TorchExecutable& executable, const Graph& graph) {
  if (!recording_) return;
  absl::Status added = feedback_->Add(runs_, graph, executable.last_run_stats().node_seconds);
  if (!added.ok()) {
    note_ = absl::StrCat("warning: calibration from the steps not saved: ", added.message());
  } else if (feedback_->saved()) {
    note_ = feedback_->summary();
  }
}

}  // namespace magi
