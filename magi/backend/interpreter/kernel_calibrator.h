// The KernelCalibrator of LibTorch backends: times each kernel with short micro-runs,
// calling the op exactly as the interpreter does (BuildStepPlan + CallOperator, the
// result check included) on inputs synthesized from the node's operand types.
//
//   TorchKernelCalibratorOptions options;
//   options.communicators = {{"dp", communicator}};   // the step's process groups
//   options.progress = rank == 0;
//   compile.cost_model.calibrator = MakeTorchKernelCalibrator(options);
//
// Inputs: floating tensors uniform in [0.5, 1) (no denormals, valid for log/sqrt/div),
// integer tensors uniform in [1, n) with n the smallest dimension of the node's floating
// tensors (so they are valid indices, targets and divisors), booleans false; the IR's
// strides are honoured. Each compute kernel runs once to warm up, then until
// `seconds_per_kernel` is spent (between `min_runs` and `max_runs` runs); its time is the
// mean run. On CPU the runs are rounds over all the kernels in the order the step first
// runs them (one run of each per round), not one kernel's runs back to back: back to back
// a kernel finds its inputs in cache and the intra-op threads still spinning from its last
// run, which a step does not (on this 2-core machine, with OpenBLAS, the tiny step's compute
// took 1.65x its back-to-back micro-runs at one intra-op thread and 3x at two; in step
// order 1.05-1.1x and 1.6x). Step order alone leaves operands colder than a step does, so
// before each timed run the kernel's operands that the step finds in the core's cache
// (written shortly before it: magi/analysis/cache_reuse.h) are read into it. (The mean, not
// the median: on a machine whose cores are shared, a step's kernels are preempted in
// proportion to their time, and the mean counts that; the median of short kernels would
// not.) On CUDA each run is timed by CUDA events on the
// device, behind a spin kernel that keeps the host's dispatch out of the time (the
// kernels' time as a CUDA graph replays them), and magi::adamw is timed as the
// multi-tensor kernel nccl_stream runs it with; a collective over one rank is left to the
// formula there (nccl_stream skips it).
//
// Collectives are measured through the step's own communicators, start + wait (as in a
// step where nothing overlaps them), with every rank in lockstep: every rank compiles the
// same graph and measures the same list in the same order, after the ranks have agreed
// (one all-gather) on which kernels any of them lacks (after a fixed-size exchange that
// checks they ask for the same kernels at all). Each run follows as much compute
// as the step runs before the collective (the same work on every rank): on this 2-core
// machine, 9 Gloo all-gathers of a layer's parameters took 6.4 ms back to back but
// 32-35 ms after 30-100 ms of compute (the ranks drift apart, and threads that ran long
// wake up late on shared cores), and in the step they took what the latter predicts. On
// CPU a collective runs collective_runs times, then as many more as seconds_per_collective
// allows (up to max_collective_runs): a run there either takes the transport's time or
// stalls for a scheduler slice, and 18 runs' mean left the tiny step's first prediction
// 17% off (RMS over 6 runs) where 80 left it 7%. The times are then exchanged (one
// more all-gather) and every rank returns the mean over the ranks, in rank order, so the
// tables, and hence the plans, are identical everywhere. With more than one
// communicator (HSDP), the exchanges gather over each in turn, by group name.
//
// On CPU, after the micro-runs, the step graph itself runs on synthesized inputs through
// the interpreter with the step's communicators (step_runs and its kin below), and each
// kernel's and collective's time is its mean node time there: what the step pays by
// construction, where micro-runs of Gloo collectives came out 10-20% low and step-order
// kernel micro-runs depend on what the cache holds. A graph that cannot run so keeps its
// micro-run times, and so does one whose run would hold more memory than
// max_step_run_bytes.
//
// What it does NOT measure: kernels with dynamic shapes, data-dependent ops, ops that
// fail on the synthesized inputs (returned without a time: the formula stays), and
// overlap (a collective's time is its own; the simulator overlaps it).
#ifndef MAGI_BACKEND_INTERPRETER_KERNEL_CALIBRATOR_H_
#define MAGI_BACKEND_INTERPRETER_KERNEL_CALIBRATOR_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "magi/backend/communicator.h"
#include "magi/backend/kernel_calibrator.h"

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
  // step graph on synthesized inputs (the .cc says why): step_warmup_runs runs (at least 1),
  // then as many as seconds_for_step_runs allows at the slowest rank's pace, between
  // min_step_runs and max_step_runs. false: micro-runs only, as on CUDA.
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
  // seconds_per_collective at the slowest rank's pace (MeasureCollective says why).
  int max_collective_runs = 100;
  double seconds_per_collective = 0.25;
  // CPU: the bytes of this core's cache. A kernel's operand that the step wrote at most
  // this much data traffic before the kernel runs is read into the cache before each timed
  // run, as the step finds it there (MeasureInOrderOnCpu in the .cc says why); the rest are
  // read from wherever the previous round left them. -1: this core's L2 (sysconf), 0: none.
  int64_t cpu_cache_bytes = -1;
  // Tests: called with each kernel's operand the calibrator reads into the cache.
  std::function<void(const Node&, const at::Tensor&)> on_cache_read_for_testing;
  // A collective is measured after as much compute as the step runs before it
  // (CollectiveIssue::compute_before_seconds), up to this much: the effect grows little
  // beyond tens of milliseconds (below), and this bounds the calibration's time.
  double max_compute_before_seconds = 0.03;
  // Compute kernels still unmeasured after this long are left to the formula (a warning
  // says how many); collectives are always measured (their count is small and every
  // rank must take part in each).
  double max_seconds = 120;
  bool progress = false;  // progress and warnings on stderr (one rank's)
};

std::shared_ptr<KernelCalibrator> MakeTorchKernelCalibrator(const TorchKernelCalibratorOptions& options);

// "cpu <model name>, <N> threads, libtorch <version>" (/proc/cpuinfo, at::get_num_threads)
// or "cuda <device name>, libtorch <version>".
std::string TorchDeviceKey(const at::Device& device);

}  // namespace magi

#endif  // MAGI_BACKEND_INTERPRETER_KERNEL_CALIBRATOR_H_
