// Calibration from the steps themselves: the node times of a few real steps, folded into
// a second cache file per device key, which later compiles prefer to micro-runs.
//
// Calibration by default (auto_calibration.h) times each kernel of a step in micro-runs
// before the step first runs. On a few shared CPU cores that misses part of what a step
// really pays: collectives that wait for the other ranks' scheduling or for cores busy with
// compute, run-to-run changes of the machine. The runtime's per-node times of real steps have it (RunStats::
// node_seconds: compute nodes as they ran; a Gloo collective from when it could start to
// when its results reached the step, CollectiveHandle::timing). This class takes those of
// the runs after the first `skip_steps` (which warm up allocators and transports), up to
// `max_steps` of them, folds their per-key means into `<device key>.steps.csv` next to the
// micro-run cache (CalibrationCache::Fold: the entries the file held when this run began
// weigh at most 4x this run's samples, so it follows the machine as it changes), and
// writes the file after 8, 16, 32, ... recorded runs, each time folding all of this run's
// samples into those older entries again (so a run counts once, however long it ran), and
// once more on Flush (the front ends' recorder flushes when it goes) if runs were recorded
// since; a run of fewer than skip + 8 steps leaves nothing (too few samples to move the
// file). Ranks on one machine each record and write the same file: the last write wins,
// which loses nothing that matters (they run the same step in lockstep, so their folds are
// samples of the same times; each write is atomic). AutoCalibration then takes a kernel's
// time from that file before the micro-run file, so the next compile on this device
// predicts with what the steps took. The prediction of the run that records is unchanged
// (it was made at compile time, before any step).
//
// Only for runtimes whose node times are the nodes' real durations: the interpreter on
// CPU (the front ends make one for CPU steps only). On CUDA, kernels are asynchronous and
// the calibrator's CUDA-event micro-runs already time them as a step does.
//
//   StepTimeFeedback feedback(cache_dir, calibrator->DeviceKey());
//   executable.set_profile_nodes(feedback.Wants(run));   // before run `run` (1-based)
//   ... run ...
//   if (feedback.Wants(run)) status = feedback.Add(run, graph, stats.node_seconds);
#ifndef MAGI_COMPILER_STEP_TIME_FEEDBACK_H_
#define MAGI_COMPILER_STEP_TIME_FEEDBACK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "magi/cost/calibration.h"
#include "magi/cost/calibration_cache.h"
#include "magi/ir/graph.h"

namespace magi {

struct StepTimeFeedbackOptions {
  int skip_steps = 2;  // runs not recorded first (warm-up)
  int first_save = 8;  // the file is written after this many recorded runs, then after 2x, 4x, ...
  int max_steps = 64;  // runs recorded at most (the last one is always written)
};

class StepTimeFeedback {
 public:
  // `cache_dir` "" is CalibrationCache::DefaultDir().
  StepTimeFeedback(const std::string& cache_dir, const std::string& device_key, StepTimeFeedbackOptions options = {});

  // Whether run `run` (1-based, counted by the caller) is one to record.
  bool Wants(int64_t run) const;
  // Records run `run`'s node times (`node_seconds[i]` belongs to graph.nodes()[i]) and,
  // at a saving point, writes the file. InvalidArgument for times that do not match the
  // graph (none: a runtime that does not profile); a file that cannot be written is an
  // error too. The caller may report either as a warning (the run itself is unaffected);
  // after one, nothing more is recorded.
  absl::Status Add(int64_t run, const Graph& graph, const std::vector<double>& node_seconds);

  // Writes the runs recorded since the last write, once at least `first_save` runs were
  // recorded (a run that ends between saving points keeps all its steps). OK when there
  // is nothing to write.
  absl::Status Flush();

  // Whether recording stopped on an error (Add said which).
  bool failed() const { return failed_; }
  // Whether the file has been written (with this run's times so far).
  bool saved() const { return saved_steps_ > 0; }
  const std::string& path() const { return cache_.path(); }
  // "calibration: 129 kernel times of steps 3-18 folded into PATH" once saved, else "".
  const std::string& summary() const { return summary_; }

 private:
  absl::Status Save();

  StepTimeFeedbackOptions options_;
  CalibrationCache cache_;
  CalibrationTable before_;    // the file's entries when this run began
  CalibrationTable earlier_;   // this run's samples of graphs recorded before the current one, per key
  std::unique_ptr<RunTimeAccumulator> current_;  // this run's samples of the graph recorded last
  int recorded_steps_ = 0;
  int saved_steps_ = 0;  // recorded_steps_ at the last write
  int next_save_ = 0;
  bool failed_ = false;
  int64_t first_recorded_ = 0;
  int64_t last_recorded_ = 0;
  std::string summary_;
};

}  // namespace magi

#endif  // MAGI_COMPILER_STEP_TIME_FEEDBACK_H_
