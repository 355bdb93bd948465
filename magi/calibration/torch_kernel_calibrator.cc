#include "magi/calibration/torch_kernel_calibrator.h"

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/status_macros.h"
#include "magi/calibration/collective_timing.h"
#include "magi/calibration/cpu_micro_runs.h"
#include "magi/calibration/cpu_step_runs.h"
#include "magi/calibration/input_synthesis.h"
#include "magi/calibration/kernel_runs.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/calibration/rank_agreement.h"
#include "magi/calibration/step_plans.h"
#include "magi/ir/collectives.h"

namespace magi {
namespace {

using calibration::Clock;
using calibration::SecondsSince;
using calibration::Timing;

class TorchKernelCalibrator : public KernelCalibrator {
 public:
  explicit TorchKernelCalibrator(TorchKernelCalibratorOptions options)
      : options_(std::move(options)),
        cache_bytes_(options_.cpu_cache_bytes >= 0 ? options_.cpu_cache_bytes : calibration::CoreCacheBytes()),
        exchange_(options_.communicators, options_.device),
        runner_(options_, log_),
        step_runs_(options_, exchange_, plans_, log_) {}

  std::string DeviceKey() const override { return TorchDeviceKey(options_.device); }

  absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override {
    calibration::RestoreGenerators restore(options_.device);
    return Measure(requests);
  }

 private:
  absl::StatusOr<std::vector<KernelTime>> Measure(const std::vector<KernelRequest>& requests) {
    plans_.Clear();
    const size_t n = requests.size();
    // 0. The ranks must ask for the same kernels; on a mismatch (ranks compiled different
    // graphs: deterministic mode's plan check then names them) nothing is measured, on any
    // rank.
    MAGI_ASSIGN_OR_RETURN(bool same, exchange_.SameRequestsEverywhere(requests));
    if (!same) {
      std::fprintf(stderr,
                   "magi: warning: the ranks asked to calibrate different kernels (their step graphs differ: another "
                   "model or pipeline on some rank?); nothing is measured\n");
      return std::vector<KernelTime>(n);
    }
    if (n == 0) return std::vector<KernelTime>();
    std::vector<std::optional<double>> known(n);
    std::vector<std::optional<int64_t>> known_working_bytes(n);
    for (size_t i = 0; i < n; ++i) {
      known[i] = requests[i].known;
      known_working_bytes[i] = requests[i].known_working_bytes;
    }
    // 1. Which kernels any rank lacks: every rank measures those, in the same order.
    MAGI_ASSIGN_OR_RETURN(std::vector<bool> measure, exchange_.AgreeOnMissing(known));
    // A collective over one rank on CUDA is left to the formula (IsOneRankCollectiveOnCuda)
    // before anything is announced, so that a compile from a cached table announces no
    // measurement.
    std::vector<bool> formula_only(n, false);
    int to_measure = 0, collectives = 0;
    for (size_t i = 0; i < n; ++i) {
      formula_only[i] = measure[i] && calibration::IsOneRankCollectiveOnCuda(options_, *requests[i].node);
      to_measure += measure[i] && !formula_only[i];
      collectives += measure[i] && !formula_only[i] && IsCollectiveStart(requests[i].node->op());
    }

    // 2. Measure: compute kernels on each rank by itself, then the collectives in lockstep.
    std::vector<std::optional<Timing>> timings(n);
    if (to_measure > 0) {
      Progress(absl::StrFormat("magi: calibrating %d kernels of the step%s on %s...", to_measure,
                               collectives > 0 ? absl::StrFormat(" (%d collectives, in lockstep)", collectives) : "",
                               DeviceKey()),
               /*line=*/true);
      auto start = Clock::now();
      int done = 0, skipped_for_time = 0;
      // On CPU the compute kernels run in step order, one run of each per round
      // (cpu_micro_runs.h); partition calls and collectives one by one below.
      std::vector<bool> in_order(n, false);
      if (options_.device.is_cpu()) {
        std::vector<size_t> kernels;
        for (size_t i = 0; i < n; ++i) {
          if (measure[i] && !IsCollectiveStart(requests[i].node->op()) && requests[i].callee == nullptr) {
            kernels.push_back(i);
            in_order[i] = true;
          }
        }
        done += calibration::MeasureInOrderOnCpu(options_, cache_bytes_, plans_, runner_, log_, requests, kernels,
                                                 start, timings, skipped_for_time);
      }
      // On CPU the kernels and collectives are then timed where they run: in a few runs
      // of their step (cpu_step_runs.h); micro-runs below for the collectives of a graph
      // that cannot run so.
      if (options_.device.is_cpu() && options_.time_in_step_runs) {
        MAGI_ASSIGN_OR_RETURN(int timed, step_runs_.TimeKernelsInStepRuns(requests, measure, start, timings, in_order));
        done += timed;
      }
      for (int pass = 0; pass < 2; ++pass) {
        const bool collective_pass = pass == 1;
        for (size_t i = 0; i < n; ++i) {
          if (!measure[i] || formula_only[i] || in_order[i] ||
              IsCollectiveStart(requests[i].node->op()) != collective_pass) {
            continue;
          }
          if (!collective_pass && SecondsSince(start) > options_.max_seconds) {
            ++skipped_for_time;
            continue;
          }
          MAGI_ASSIGN_OR_RETURN(timings[i], MeasureOne(requests[i]));
          ++done;
          if (isatty(2)) Progress(absl::StrFormat("\rmagi: calibrating... %d/%d", done, to_measure), false);
        }
      }
      // Those with a time: a kernel tried and found unmeasurable is listed below instead.
      int timed = 0;
      for (const std::optional<Timing>& timing : timings) timed += timing.has_value();
      std::string note = absl::StrFormat("%smagi: calibrated %d kernels in %.1f s", isatty(2) ? "\r" : "", timed,
                                         SecondsSince(start));
      if (timed < done) absl::StrAppendFormat(&note, "; %d could not be timed", done - timed);
      if (skipped_for_time > 0) {
        absl::StrAppendFormat(&note, "; %d left to the formula after the %.0f s limit", skipped_for_time,
                              options_.max_seconds);
      }
      Progress(note, true);
      if (std::vector<std::string> failures = log_.TakeFailures(); !failures.empty()) {
        std::string list;
        for (size_t f = 0; f < failures.size() && f < 3; ++f) absl::StrAppend(&list, "\n  ", failures[f]);
        if (failures.size() > 3) absl::StrAppend(&list, "\n  ...");
        Progress(absl::StrCat("magi: ", failures.size(),
                              " kernel(s) could not run by themselves (the formula times them):", list),
                 true);
      }
    }
    plans_.Clear();  // the graphs may not outlive this call
    // 3. Agree on the times.
    return exchange_.AgreeOnTimes(measure, timings, known, known_working_bytes);
  }

  // Times one kernel; nullopt (with the reason kept for the warning) when it cannot run
  // by itself. Fails only for a collective (its peers wait on it).
  absl::StatusOr<std::optional<Timing>> MeasureOne(const KernelRequest& request) {
    const Node& node = *request.node;
    if (request.callee != nullptr) return runner_.MeasureCall(node, *request.callee);
    absl::StatusOr<const NodePlan*> found = plans_.PlanOf(node);
    if (!found.ok()) return log_.Unmeasurable(node, found.status().message());
    const NodePlan& plan = **found;
    const StepPlan& step = plans_.StepOf(*node.graph());
    std::vector<at::Tensor> slots(step.num_slots);
    at::Device device(at::kCPU);
    // A failure here depends on the graph alone: every rank skips the same kernels.
    absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> operands = calibration::SynthesizeOperands(node, step);
    if (!operands.ok()) return log_.Unmeasurable(node, operands.status().message());
    for (auto& [slot, tensor] : *operands) {
      if (tensor.is_cuda()) device = tensor.device();
      slots[slot] = std::move(tensor);
    }
    switch (plan.kind) {
      case NodePlan::Kind::kCollectiveStart:
        return calibration::MeasureCollective(options_, log_, plan, slots, request.issues);
      case NodePlan::Kind::kOp:
      case NodePlan::Kind::kAdamW:
        return runner_.MeasureRuns(node, device, [&]() -> absl::Status { return runner_.RunAsTheStep(plan, slots, device); });
      case NodePlan::Kind::kWait:
      case NodePlan::Kind::kCall:
      case NodePlan::Kind::kLocalShard:  // this rank's slice of a gathered tensor: left to the formula
        break;
    }
    return log_.Unmeasurable(node, "not a kernel", /*failed_to_run=*/false);
  }

  void Progress(const std::string& text, bool line) const { calibration::PrintProgress(options_.progress, text, line); }

  // Declared in the order they are made: each part holds references to those above it.
  TorchKernelCalibratorOptions options_;
  int64_t cache_bytes_;  // options_.cpu_cache_bytes, resolved
  calibration::FailureLog log_;
  calibration::StepPlans plans_;
  calibration::RankExchange exchange_;
  calibration::KernelRunner runner_;
  calibration::StepRunTimer step_runs_;
};

}  // namespace

std::shared_ptr<KernelCalibrator> MakeTorchKernelCalibrator(const TorchKernelCalibratorOptions& options) {
  return std::make_shared<TorchKernelCalibrator>(options);
}

}  // namespace magi
