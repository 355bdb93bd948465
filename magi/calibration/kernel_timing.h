// What the calibrator's parts share (no LibTorch): a kernel's measured time, the clock it
// is measured with, and the log of kernels that could not be timed.
//
//   FailureLog log;
//   std::optional<Timing> timing = log.Unmeasurable(node, "cannot make a f32[?]");  // nullopt
//
// A kernel that cannot be timed is returned without a time (the cost model's formula
// stays); the log keeps why, for the calibration's warning, and remembers the kernels that
// could not even run, for the step runs (magi/calibration/cpu_step_runs.h), which would fail
// on them.
#ifndef MAGI_CALIBRATION_KERNEL_TIMING_H_
#define MAGI_CALIBRATION_KERNEL_TIMING_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "magi/ir/graph.h"

namespace magi::calibration {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The mean of `values`; 0 for none. (The mean, not the median: on a machine whose cores are
// shared, a step's kernels are preempted in proportion to their time, and the mean counts
// that; the median of short kernels would not.)
double Mean(const std::vector<double>& values);

// One kernel's time on this rank.
struct Timing {
  double seconds = 0;
  int runs = 0;
  int64_t working_bytes = -1;  // partition calls (KernelTime::working_bytes); -1: unknown
};

// Why kernels could not be timed, for one calibration's warning, and which could not run at
// all, for the calibrator's lifetime (the compile driver asks about a graph's kernels and
// its collectives in separate calls).
class FailureLog {
 public:
  // Records that `node` has no time, and why; returns nullopt (its timing). `failed_to_run`:
  // the kernel itself could not run (or get inputs), not merely something the calibrator
  // does not time; a step run would fail on it. A collective is never remembered so (its
  // failures depend on the communicator, not on the graph).
  std::optional<Timing> Unmeasurable(const Node& node, absl::string_view why, bool failed_to_run = true);

  // Whether a kernel with `node`'s key could not run, in any call so far.
  bool FailedToRun(const Node& node) const;

  // "op: why" of each kernel recorded since the last TakeFailures, in order; clears them.
  std::vector<std::string> TakeFailures();

 private:
  std::vector<std::string> failures_;
  absl::flat_hash_set<std::string> failed_keys_;  // CalibrationTable::KeyOf
};

// Prints `text` on stderr when `enabled` (one rank's progress), with a newline if `line`.
void PrintProgress(bool enabled, const std::string& text, bool line);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_KERNEL_TIMING_H_
