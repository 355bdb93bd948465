// Runs and times one kernel by itself: a compute node called exactly as the interpreter
// calls it (CallOperator + CheckResults, magi/backend/common/step_plan.h), or a compiled
// partition (magi::call) run through its executable, each on synthesized inputs
// (magi/calibration/input_synthesis.h).
//
//   KernelRunner runner(options, log);
//   MAGI_ASSIGN_OR_RETURN(std::optional<Timing> timing,
//                         runner.MeasureRuns(node, device, [&] { return runner.RunOnce(plan, slots); }));
//
// A kernel runs once to warm up, then until `seconds_per_kernel` is spent (between
// `min_runs` and `max_runs` runs); its time is the mean run. On CUDA the runs are timed on
// the device (magi/calibration/cuda_timing.h). A kernel that fails (its status, or a
// LibTorch exception from it or from a synchronization) has no time: the reason goes to
// the FailureLog. Nothing it runs lets an exception escape, since the ranks' exchanges
// follow: a rank that threw would leave the others waiting.
#ifndef MAGI_CALIBRATION_KERNEL_RUNS_H_
#define MAGI_CALIBRATION_KERNEL_RUNS_H_

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/backend.h"
#include "magi/backend/torch_executable.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/calibration/options.h"

namespace magi::calibration {

class KernelRunner {
 public:
  // Both must outlive the runner.
  KernelRunner(const TorchKernelCalibratorOptions& options, FailureLog& log) : options_(options), log_(log) {}

  // One run of a compute node (kOp, kAdamW) over `slots`, checked against the IR as the
  // interpreter checks it.
  absl::Status RunOnce(const NodePlan& plan, const std::vector<at::Tensor>& slots);
  // RunOnce with LibTorch's exceptions turned into a status.
  absl::Status GuardedRun(const NodePlan& plan, const std::vector<at::Tensor>& slots);
  // A compute node as the step's runtime on `device` runs it: magi::adamw on CUDA as the
  // multi-tensor kernel nccl_stream, the CUDA runtime, runs it with (one tensor per launch
  // here); the interpreter's op-by-op reference update is a check, not what a CUDA step
  // pays.
  absl::Status RunAsTheStep(const NodePlan& plan, const std::vector<at::Tensor>& slots, const at::Device& device);

  // Times `run` (one run of `node`'s kernels, checked): the mean of a few runs. nullopt
  // (the reason logged) when a run fails or throws.
  absl::StatusOr<std::optional<Timing>> MeasureRuns(const Node& node, const at::Device& device,
                                                    const std::function<absl::Status()>& run);

  // A compiled partition (magi::call), run by itself on inputs of the call's types, with
  // the most memory one of its runs allocates (Timing::working_bytes). nullopt (logged)
  // for an executable that does not run LibTorch tensors or inputs that cannot be made.
  absl::StatusOr<std::optional<Timing>> MeasureCall(const Node& node, Executable& callee);

 private:
  absl::StatusOr<std::optional<Timing>> MeasureRunsUnguarded(const Node& node, const at::Device& device,
                                                             const std::function<absl::Status()>& run);
  // The most memory one run of `callee` allocates beyond `inputs`, its results included:
  // on CUDA the caching allocator's peak over the run, else what the executable counts
  // (RunStats::peak_allocated_bytes). -1: unknown (an executable that does not count, a
  // failed run: the cost model then plans the callee's nodes).
  int64_t MeasureWorkingBytes(const at::Device& device, TorchExecutable& callee, const std::vector<at::Tensor>& inputs);

  const TorchKernelCalibratorOptions& options_;
  FailureLog& log_;
  torch::jit::Stack stack_;
};

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_KERNEL_RUNS_H_
