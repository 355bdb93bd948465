// On CPU, after the micro-runs, the kernels and collectives of a step are timed in runs of
// their own step graph: the graph compiled by the interpreter with the step's
// communicators and run on synthesized inputs (every rank the same graph, so the
// collectives pair up), its node times profiled as a real step's are (the interpreter's
// RunStats::node_seconds, which StepTimeFeedback folds into the steps' cache after real
// steps), after options.step_warmup_runs runs that are not counted.
//
//   StepRunTimer step_runs(options, exchange, plans, log);
//   MAGI_ASSIGN_OR_RETURN(int collectives,
//                         step_runs.TimeKernelsInStepRuns(requests, measure, start, timings, timed));
//
// Why: micro-runs of a Gloo collective after a burst of matmuls came out 10-20% below what
// the same run's steps took (the tiny 2-rank step, the 2-core machine, 2026-12-05; not the
// ranks' skew, not the interpreter's own time), and step-order kernel micro-runs
// (magi/calibration/cpu_micro_runs.h) land between all-cold and all-warm caches (+9% and
// -5% of the steps' compute) depending on the run; the step's own runs have what the step
// pays by construction.
//
// What it does NOT run: a graph with a kernel that could not run (FailureLog::FailedToRun),
// a partition call, a group without a communicator, an input that cannot be synthesized,
// or a peak above max_step_run_bytes (on any rank: they agree). Such a graph keeps its
// micro-run times, and its collectives are micro-run.
#ifndef MAGI_CALIBRATION_CPU_STEP_RUNS_H_
#define MAGI_CALIBRATION_CPU_STEP_RUNS_H_

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/backend/backend.h"
#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/calibration/options.h"
#include "magi/calibration/rank_agreement.h"
#include "magi/calibration/step_plans.h"
#include "magi/cost/calibration.h"

namespace magi::calibration {

class StepRunTimer {
 public:
  // All must outlive the timer. Its step runs are kept for its lifetime, by the graph's
  // structure: the compile driver's call for a step's kernels serves its later call for
  // the step's collectives.
  StepRunTimer(const TorchKernelCalibratorOptions& options, const RankExchange& exchange, StepPlans& plans,
               const FailureLog& log)
      : options_(options), exchange_(exchange), plans_(plans), log_(log) {}

  // Times the kernels and collectives among `requests` that are to be measured
  // (`measure`) in runs of their graphs, into `timings` (a key's time: its mean over its
  // nodes in the step; a collective: start plus wait, and with a communicator that times
  // its collectives the wait holds nothing). `in_order` marks the kernels timed in step
  // order already; the collectives timed here are marked too. Fails only if a run fails:
  // the ranks may then be mid-collective, and the error names the run. Returns how many
  // collectives it timed.
  absl::StatusOr<int> TimeKernelsInStepRuns(const std::vector<KernelRequest>& requests, const std::vector<bool>& measure,
                                            Clock::time_point calibration_start,
                                            std::vector<std::optional<Timing>>& timings, std::vector<bool>& in_order);

 private:
  // `graph` run on synthesized inputs: options.step_warmup_runs runs, then as many as
  // seconds_for_step_runs allows at the slowest rank's pace (between min_step_runs and
  // max_step_runs); each key's mean time over those and its number of samples, as
  // calibration from real steps records them (RunTimeAccumulator: a collective is its
  // start plus its wait). nullopt (said on stderr) when some rank cannot run it: every
  // rank first says whether it can (one exchange), so that they all run it or none does.
  // Runs once per graph structure for this timer's lifetime.
  absl::StatusOr<std::optional<CalibrationTable>> RunStep(const Graph& graph, Clock::time_point calibration_start);
  // The interpreter's executable of `graph` with the step's communicators bound, and its
  // synthesized inputs (SynthesizeGraphInputs). "" when this rank can run it, else why not.
  std::string PrepareStepRun(const Graph& graph, Clock::time_point calibration_start,
                             std::unique_ptr<Executable>& compiled, std::vector<at::Tensor>& inputs);
  // Why a run of `graph` would hold more memory than options.max_step_run_bytes allows
  // ("" if it would not, or if neither the limit nor the host's free memory is known).
  std::string ExceedsStepRunMemory(const Graph& graph) const;

  const TorchKernelCalibratorOptions& options_;
  const RankExchange& exchange_;
  StepPlans& plans_;
  const FailureLog& log_;
  // RunStep's results by the graph's fingerprint (its nodes' keys in order).
  absl::flat_hash_map<uint64_t, std::optional<CalibrationTable>> step_runs_;
};

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_CPU_STEP_RUNS_H_
