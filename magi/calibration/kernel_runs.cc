#include "magi/calibration/kernel_runs.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/calibration/cuda_timing.h"
#include "magi/calibration/input_synthesis.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"
#include "magi/ir/magi_ops.h"

namespace magi::calibration {

absl::Status KernelRunner::RunOnce(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
  std::vector<at::Tensor> results;
  if (plan.kind == NodePlan::Kind::kAdamW) {
    std::vector<at::Tensor> o;
    for (int s : plan.args[0].slots) o.push_back(slots[s]);
    MAGI_RETURN_IF_ERROR(compat::CallTorch(
        "", [&] { results = AdamWReferenceOf(plan.adamw_split, o, plan.adamw, plan.adamw_in_place); }));
  } else {
    MAGI_ASSIGN_OR_RETURN(results, CallOperator(plan, slots, stack_));
    stack_.clear();
  }
  return CheckResults(plan, results, /*allow_stride_check=*/false);
}

absl::Status KernelRunner::GuardedRun(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
  return compat::CallTorch("", [&] { return RunOnce(plan, slots); });
}

absl::Status KernelRunner::RunAsTheStep(const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                        const at::Device& device) {
  if (plan.kind == NodePlan::Kind::kAdamW && device.is_cuda()) {
    if (std::optional<absl::Status> fused = RunFusedAdamWOnCuda(plan, slots)) return *fused;
  }
  return RunOnce(plan, slots);
}

// A LibTorch error thrown by the kernels or by a synchronization (an executable that does
// not turn every c10::Error into a status, a device-side assert) makes the node
// unmeasurable on this rank; it must not escape, or the other ranks would wait for this
// one in the exchange of the times.
absl::StatusOr<std::optional<Timing>> KernelRunner::MeasureRuns(const Node& node, const at::Device& device,
                                                                const std::function<absl::Status()>& run) {
  bool thrown = false;
  absl::StatusOr<std::optional<Timing>> timing =
      compat::CallTorchWith([&] { return MeasureRunsUnguarded(node, device, run); },
                            [&](const compat::CaughtException& caught) {
                              thrown = true;
                              ClearDeviceError(device);
                              return absl::InternalError(caught.message);
                            });
  if (thrown) return log_.Unmeasurable(node, timing.status().message());
  return timing;
}

absl::StatusOr<std::optional<Timing>> KernelRunner::MeasureRunsUnguarded(const Node& node, const at::Device& device,
                                                                         const std::function<absl::Status()>& run) {
  if (TimedOnDevice(device)) {
    absl::StatusOr<Timing> timing =
        TimeOnCuda(device, RunBudget{options_.min_runs, options_.max_runs, options_.seconds_per_kernel}, run);
    if (!timing.ok()) return log_.Unmeasurable(node, timing.status().message());
    return *timing;
  }
  // A warm-up run (first-call allocations, lazy initialization) that also checks the op.
  if (absl::Status warm = run(); !warm.ok()) return log_.Unmeasurable(node, warm.message());
  std::vector<double> samples;
  auto budget_start = Clock::now();
  while (static_cast<int>(samples.size()) < options_.max_runs &&
         (static_cast<int>(samples.size()) < options_.min_runs ||
          SecondsSince(budget_start) < options_.seconds_per_kernel)) {
    Synchronize(device);
    auto start = Clock::now();
    if (absl::Status ran = run(); !ran.ok()) return log_.Unmeasurable(node, ran.message());
    Synchronize(device);
    samples.push_back(SecondsSince(start));
  }
  return Timing{Mean(samples), static_cast<int>(samples.size())};
}

absl::StatusOr<std::optional<Timing>> KernelRunner::MeasureCall(const Node& node, Executable& callee) {
  auto* executable = dynamic_cast<TorchExecutable*>(&callee);
  if (executable == nullptr) {
    return log_.Unmeasurable(node,
                             absl::StrCat("backend '", callee.backend_name(), "' does not run LibTorch tensors"),
                             /*failed_to_run=*/false);
  }
  // Integer inputs may index any tensor inside the partition, not only its inputs and
  // outputs: below the smallest floating dimension of all of them.
  int64_t bound = IndexBound(node);
  const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
  if (const Graph* body = module != nullptr ? module->FindGraph(CalleeName(node)) : nullptr) {
    for (const Node* inner : body->nodes()) bound = std::min(bound, IndexBound(*inner));
  }
  std::vector<at::Tensor> inputs;
  // Where the partition runs: its results' device (a partition may take no tensor from
  // the device, e.g. one that makes its tensors with factory ops).
  at::Device device(at::kCPU);
  for (const Value* result : node.results()) {
    if (result->type().is_tensor() && result->type().tensor().device.type == DeviceType::kCuda) {
      device = compat::ToTorchDevice(result->type().tensor().device);
    }
  }
  for (const Value* operand : node.operands()) {
    if (!operand->type().is_tensor()) {
      return log_.Unmeasurable(node, absl::StrCat("%", operand->name(), " is not a tensor"));
    }
    absl::StatusOr<at::Tensor> tensor = Synthesize(operand->type().tensor(), bound);
    if (!tensor.ok()) return log_.Unmeasurable(node, tensor.status().message());
    if (tensor->is_cuda()) device = tensor->device();
    inputs.push_back(*std::move(tensor));
  }
  MAGI_ASSIGN_OR_RETURN(std::optional<Timing> timing,
                        MeasureRuns(node, device, [&]() -> absl::Status { return executable->Run(inputs).status(); }));
  if (timing) timing->working_bytes = MeasureWorkingBytes(device, *executable, inputs);
  return timing;
}

int64_t KernelRunner::MeasureWorkingBytes(const at::Device& device, TorchExecutable& callee,
                                          const std::vector<at::Tensor>& inputs) {
  // A thrown error must not escape: the ranks' exchange follows.
  absl::StatusOr<int64_t> bytes = compat::CallTorch("", [&]() -> int64_t {
    if (std::optional<int64_t> peak = PeakBytesOfRunOnCuda(device, [&] { return callee.Run(inputs).ok(); })) {
      return *peak;
    }
    if (!callee.Run(inputs).ok()) return -1;
    return callee.last_run_stats().peak_allocated_bytes;
  });
  if (!bytes.ok()) {
    ClearDeviceError(device);
    return -1;
  }
  return *bytes;
}

}  // namespace magi::calibration
