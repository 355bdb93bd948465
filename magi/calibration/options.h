// The knobs of the LibTorch kernel calibrator (magi/calibration/torch_kernel_calibrator.h),
// in one plain struct that each of its parts reads.
#ifndef MAGI_CALIBRATION_OPTIONS_H_
#define MAGI_CALIBRATION_OPTIONS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "magi/comm/communicator.h"
#include "magi/ir/graph.h"

namespace magi {

struct TorchKernelCalibratorOptions {
  // The communicators of the step's process groups, by group name (the IR's `group`
  // argument). Empty: one process; collectives are not measured.
  std::map<std::string, std::shared_ptr<Communicator>> communicators;
  // Where the step runs: names the device in the key and holds the exchanged times.
  at::Device device = at::Device(at::kCPU);
  double seconds_per_kernel = 0.004;
  int min_runs = 3;
  int max_runs = 30;
  // CPU: after the micro-runs, the kernels and collectives are timed in runs of their
  // step graph on synthesized inputs (magi/calibration/cpu_step_runs.h says why):
  // step_warmup_runs runs (at least 1), then as many as seconds_for_step_runs allows at the
  // slowest rank's pace, between min_step_runs and max_step_runs. false: micro-runs only,
  // as on CUDA.
  bool time_in_step_runs = true;
  int step_warmup_runs = 2;
  int min_step_runs = 2;
  int max_step_runs = 32;
  double seconds_for_step_runs = 1.0;
  // CPU: a step run holds its graph's whole peak (magi/analysis/memory_plan.h; the
  // synthesized inputs, all parameters and optimizer state of an unoptimized step,
  // included) on top of what the caller holds: a graph whose peak is above this keeps its
  // micro-run times, where running it could end in the OOM killer. -1: half of the memory
  // available to this process (MemAvailable, or its memory cgroup's limit if smaller:
  // magi/base/host_memory.h) over the ranks of the largest communicator, which on CPU
  // share one host when launched locally. A memory budget is the plan's, not this.
  int64_t max_step_run_bytes = -1;
  int collective_runs = 18;  // timed runs of each collective at least, after one warm-up
  // CPU: then more, up to max_collective_runs, while the runs take at most
  // seconds_per_collective at the slowest rank's pace (magi/calibration/collective_timing.h
  // says why).
  int max_collective_runs = 100;
  double seconds_per_collective = 0.25;
  // CPU: the bytes of this core's cache. A kernel's operand that the step wrote at most
  // this much data traffic before the kernel runs is read into the cache before each timed
  // run, as the step finds it there (magi/calibration/cpu_micro_runs.h says why); the rest
  // are read from wherever the previous round left them. -1: this core's L2 (sysconf), 0:
  // none.
  int64_t cpu_cache_bytes = -1;
  // Tests: called with each kernel's operand the calibrator reads into the cache.
  std::function<void(const Node&, const at::Tensor&)> on_cache_read_for_testing;
  // A collective is measured after as much compute as the step runs before it
  // (CollectiveIssue::compute_before_seconds), up to this much: the effect grows little
  // beyond tens of milliseconds (magi/calibration/collective_timing.h), and this bounds the
  // calibration's time.
  double max_compute_before_seconds = 0.03;
  // Compute kernels still unmeasured after this long are left to the formula (a warning
  // says how many); collectives are always measured (their count is small and every
  // rank must take part in each).
  double max_seconds = 120;
  bool progress = false;  // progress and warnings on stderr (one rank's)
};

}  // namespace magi

#endif  // MAGI_CALIBRATION_OPTIONS_H_
