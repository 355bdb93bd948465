// The CPU's compute kernels, timed as a step runs them: one run of each per round, in the
// order the step first runs them, rounds repeated until each has min_runs samples and the
// rounds took seconds_per_kernel per kernel (at most max_runs).
//
//   int prepared = MeasureInOrderOnCpu(options, cache_bytes, plans, runner, log, requests, kernels,
//                                      calibration_start, timings, skipped_for_time);
//
// Why rounds: timed back to back, a kernel runs with its inputs in cache and the intra-op
// pool's threads still spinning from its previous run; in a step neither holds (on the
// 2-core machine, with OpenBLAS, the tiny step's compute took 1.65x its back-to-back
// micro-runs at one intra-op thread and 3x at two: a reduction's parallel region wakes
// sleeping threads; in step order 1.05-1.1x and 1.6x). Only the kernels to measure take
// part: when most are cached, the few left run closer to back to back than in the step.
// Step order alone leaves operands colder than a step does, so before each timed run the
// operands the step finds in this core's cache (magi/analysis/cache_reuse.h: written
// little traffic before the kernel) are read into it; the others stay where the previous
// round left them. On the 2-core machine (AMD EPYC, 1 MiB L2 a core) the tiny step's
// compute came out 9% above what its steps measured with every operand left cold, 5%
// below with every one read in, and 2.5% above with this (4 runs each, 2026-12-04).
//
// What it does NOT time: collectives, partition calls, anything but kOp and kAdamW nodes
// (those are logged as not kernels), nor anything on a device other than the CPU.
#ifndef MAGI_CALIBRATION_CPU_MICRO_RUNS_H_
#define MAGI_CALIBRATION_CPU_MICRO_RUNS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/kernel_runs.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/calibration/options.h"
#include "magi/calibration/step_plans.h"

namespace magi::calibration {

// This core's own cache (L2; 0 if unknown): what a kernel finds there of what the step
// touched just before it (TorchKernelCalibratorOptions::cpu_cache_bytes).
int64_t CoreCacheBytes();

// Reads one byte of every cache line of `tensor`'s storage (a CPU tensor; others are left
// alone), which leaves it in this core's caches, as a step's operand written just before
// its consumer is.
void TouchCacheLines(const at::Tensor& tensor);

// Times requests[i] for each i in `kernels` (in step order) into timings[i]; those that
// cannot run are logged in `log` and keep no time. `cache_bytes`: the cache the operands
// are read into (TorchKernelCalibratorOptions::cpu_cache_bytes, resolved). Returns how many
// it prepared (timed or found unmeasurable). Past options.max_seconds of
// `calibration_start` no kernel is prepared (those are counted in `skipped_for_time`) and
// no round starts after the first: at most one warm-up and one timed run of each prepared
// kernel lie beyond the limit.
int MeasureInOrderOnCpu(const TorchKernelCalibratorOptions& options, int64_t cache_bytes, StepPlans& plans,
                        KernelRunner& runner, FailureLog& log, const std::vector<KernelRequest>& requests,
                        const std::vector<size_t>& kernels, Clock::time_point calibration_start,
                        std::vector<std::optional<Timing>>& timings, int& skipped_for_time);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_CPU_MICRO_RUNS_H_
