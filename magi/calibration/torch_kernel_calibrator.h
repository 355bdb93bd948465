// The KernelCalibrator of LibTorch backends: times each kernel with short micro-runs,
// calling the op exactly as the interpreter does (BuildStepPlan + CallOperator, the
// result check included) on inputs synthesized from the node's operand types.
//
//   TorchKernelCalibratorOptions options;
//   options.communicators = {{"dp", communicator}};   // the step's process groups
//   options.progress = rank == 0;
//   compile.cost_model.calibrator = MakeTorchKernelCalibrator(options);
//
// It composes the parts of this package, each with its own header saying how and why:
//   input_synthesis.h    inputs every op of a step accepts; the generators restored after
//   rank_agreement.h     every rank measures the same kernels and returns the same times
//   cpu_micro_runs.h     CPU compute kernels in rounds, in step order, caches as the step has them
//   cpu_step_runs.h      then, on CPU, the kernels and collectives timed in runs of their step
//   kernel_runs.h        one kernel or partition call by itself (the rest of the micro-runs)
//   cuda_timing.h        CUDA: device time behind a spin kernel, magi::adamw fused
//   collective_timing.h  collectives through the step's communicators, in lockstep
//   device_key.h         the device part of the calibration table's key
//
// A call: (0) the ranks check they ask for the same kernels (on a mismatch nothing is
// measured, on any rank); (1) they agree on which any of them lacks; (2) each measures
// those, compute kernels first (on CPU in step order, then in step runs), then the
// collectives in lockstep; (3) they exchange the times and every rank returns the mean over
// the ranks, in rank order. With more than one communicator (HSDP), the exchanges gather
// over each in turn, by group name. The default random generators come out as they went
// in.
//
// What it does NOT measure: kernels with dynamic shapes, data-dependent ops, ops that
// fail on the synthesized inputs (returned without a time: the formula stays), and
// overlap (a collective's time is its own; the simulator overlaps it).
#ifndef MAGI_CALIBRATION_TORCH_KERNEL_CALIBRATOR_H_
#define MAGI_CALIBRATION_TORCH_KERNEL_CALIBRATOR_H_

#include <memory>

#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/device_key.h"
#include "magi/calibration/options.h"

namespace magi {

std::shared_ptr<KernelCalibrator> MakeTorchKernelCalibrator(const TorchKernelCalibratorOptions& options);

}  // namespace magi

#endif  // MAGI_CALIBRATION_TORCH_KERNEL_CALIBRATOR_H_
