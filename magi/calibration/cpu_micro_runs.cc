#include "magi/calibration/cpu_micro_runs.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_format.h"
#include "magi/calibration/input_synthesis.h"

namespace magi::calibration {
namespace {

// Where TouchCacheLines leaves what it read, so that the reads must happen (one per thread:
// ranks may be threads of one process).
thread_local volatile unsigned char touched_sink;

}  // namespace

int64_t CoreCacheBytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? bytes : 0;
}

void TouchCacheLines(const at::Tensor& tensor) {
  constexpr size_t kCacheLine = 64;
  if (!tensor.defined() || !tensor.has_storage() || !tensor.device().is_cpu()) return;
  const auto* bytes = static_cast<const volatile unsigned char*>(tensor.storage().data());
  if (bytes == nullptr) return;
  const size_t size = tensor.storage().nbytes();
  unsigned char sink = 0;
  for (size_t i = 0; i < size; i += kCacheLine) sink ^= bytes[i];
  touched_sink = sink;
}

int MeasureInOrderOnCpu(const TorchKernelCalibratorOptions& options, int64_t cache_bytes, StepPlans& plans,
                        KernelRunner& runner, FailureLog& log, const std::vector<KernelRequest>& requests,
                        const std::vector<size_t>& kernels, Clock::time_point calibration_start,
                        std::vector<std::optional<Timing>>& timings, int& skipped_for_time) {
  struct Prepared {
    size_t index;
    const NodePlan* plan;
    std::vector<std::pair<int, at::Tensor>> operands;  // (slot, synthesized tensor)
    std::vector<at::Tensor> in_cache;  // operands the step finds in cache (cache_reuse.h)
    std::vector<double> samples;
  };
  std::vector<Prepared> prepared;
  std::vector<at::Tensor> slots;  // shared: a kernel's operands are put in before its run, taken out after
  auto run = [&](const Prepared& p) {
    for (const auto& [slot, tensor] : p.operands) slots[slot] = tensor;
    absl::Status ran = runner.GuardedRun(*p.plan, slots);
    for (const auto& operand : p.operands) slots[operand.first] = at::Tensor();
    return ran;
  };
  int reached = 0;
  for (size_t i : kernels) {
    if (SecondsSince(calibration_start) > options.max_seconds) {
      ++skipped_for_time;
      continue;
    }
    ++reached;
    const Node& node = *requests[i].node;
    absl::StatusOr<const NodePlan*> found = plans.PlanOf(node);
    if (!found.ok()) {
      log.Unmeasurable(node, found.status().message());
      continue;
    }
    const NodePlan& plan = **found;
    if (plan.kind != NodePlan::Kind::kOp && plan.kind != NodePlan::Kind::kAdamW) {
      log.Unmeasurable(node, "not a kernel", /*failed_to_run=*/false);
      continue;
    }
    const StepPlan& step = plans.StepOf(*node.graph());
    if (slots.size() < static_cast<size_t>(step.num_slots)) slots.resize(step.num_slots);
    absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> operands = SynthesizeOperands(node, step);
    if (!operands.ok()) {
      log.Unmeasurable(node, operands.status().message());
      continue;
    }
    Prepared p{i, &plan, *std::move(operands), {}, {}};
    const std::vector<bool> in_cache = plans.CacheOf(*node.graph()).OperandsInCache(node, cache_bytes);
    for (size_t k = 0; k < in_cache.size() && k < p.operands.size(); ++k) {
      if (in_cache[k]) p.in_cache.push_back(p.operands[k].second);
    }
    // A warm-up run (first-call allocations, lazy initialization) that also checks the op.
    if (absl::Status warm = run(p); !warm.ok()) {
      log.Unmeasurable(node, warm.message());
      continue;
    }
    prepared.push_back(std::move(p));
  }
  const auto start = Clock::now();
  const double budget = options.seconds_per_kernel * static_cast<double>(prepared.size());
  for (int round = 0; round < options.max_runs && !prepared.empty(); ++round) {
    if (round > 0 && SecondsSince(calibration_start) > options.max_seconds) break;
    if (round >= options.min_runs && SecondsSince(start) >= budget) break;
    for (size_t k = 0; k < prepared.size();) {
      Prepared& p = prepared[k];
      for (const at::Tensor& operand : p.in_cache) {
        TouchCacheLines(operand);
        if (options.on_cache_read_for_testing) options.on_cache_read_for_testing(*requests[p.index].node, operand);
      }
      const auto run_start = Clock::now();
      absl::Status ran = run(p);
      const double seconds = SecondsSince(run_start);
      if (!ran.ok()) {
        log.Unmeasurable(*requests[p.index].node, ran.message());
        prepared.erase(prepared.begin() + k);
        continue;
      }
      p.samples.push_back(seconds);
      ++k;
    }
    if (isatty(2)) {
      PrintProgress(options.progress,
                    absl::StrFormat("\rmagi: calibrating... round %d over %d kernels in step order", round + 1,
                                    prepared.size()),
                    false);
    }
  }
  for (const Prepared& p : prepared) {
    timings[p.index] = Timing{Mean(p.samples), static_cast<int>(p.samples.size())};
  }
  return reached;
}

}  // namespace magi::calibration
