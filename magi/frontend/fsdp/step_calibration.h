// How the FSDP front ends (FsdpTrainer, FxTrainer) turn their `calibration` setting into
// the compiler's cost-model options: calibration by default.
//
//   "auto"  (the default) the step's kernels are measured where the cache
//           (${MAGI_CACHE_DIR:-~/.cache/magi}/calibration/) lacks them, with micro-runs
//           on every rank (collectives through `communicators`, in lockstep), and cached;
//   "none"  the device profile's formulas alone;
//   PATH    a CalibrationTable CSV (examples:train --calibration_out writes one), as given.
#ifndef MAGI_FRONTEND_FSDP_STEP_CALIBRATION_H_
#define MAGI_FRONTEND_FSDP_STEP_CALIBRATION_H_

#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "magi/backend/communicator.h"
#include "magi/compiler/compile_options.h"

namespace magi {

// Sets `cost_model.calibration_csv` or `.calibrator` from `calibration` (see above).
// `communicators` by process-group name; `device` is where the step runs. Progress is
// shown on stderr by the rank that is rank 0 of every communicator. InvalidArgument for
// an empty setting.
absl::Status SetStepCalibration(const std::string& calibration,
                                const std::map<std::string, std::shared_ptr<Communicator>>& communicators,
                                const at::Device& device, CostModelOptions& cost_model);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_STEP_CALIBRATION_H_
