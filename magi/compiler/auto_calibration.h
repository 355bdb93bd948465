// Calibration by default: before the cost model decides anything about a step, every
// distinct kernel of it gets a measured time.
//
// For each distinct CalibrationTable key of a graph (compute nodes and collective
// starts; not waits or calls) that the cost model's table lacks, the time comes from
// what earlier runs' steps took on this device (the ".steps.csv" file that
// StepTimeFeedback writes), else from the device's micro-run cache (calibration_cache.h:
// one file per KernelCalibrator::DeviceKey()), else the KernelCalibrator measures it
// (short micro-runs, on every rank in lockstep) and the micro-run cache gets it. Compute
// kernels are timed first; each collective is then measured after as much compute as the
// step runs before each place it is issued (from the times just measured): collectives
// issued after compute take longer than back to back (CollectiveIssue says why). The compile driver calls Calibrate on
// the graph it is about to search or run passes on, again on the optimized graph,
// whose fused collectives and new shapes were not there before, and (CalibrateCalls) on
// the partitioned step once its partitions are compiled. The table is filled with the times the calibrator
// returns (the same on every rank), never straight from this machine's file, so all
// ranks plan with one table even when their caches differ.
//
// Each cache file is read once, when this object is made, and the compile plans with that
// snapshot and the times measured since: another process that saves into the same files
// meanwhile changes nothing of this compile (CalibrationCache says how its writers take
// turns). Summary() and stats() name each file read and the hash of what was read, and the
// hash of the table the compile ended with (equal hashes: the same times, bit for bit).
//
// Deterministic mode plans from the device's pinned table (CalibrationSource::kPinned)
// first: a kernel's time, once pinned, is the time of every later deterministic compile,
// whatever the two other files say by then. A kernel the pinned table lacks is timed as
// above (earlier steps, the micro-run cache, or measured), and that time is pinned; the
// first compile to pin a kernel wins (a compile that raced it plans with its own time once,
// and its summary's hashes differ).
//
// What is NOT done here: measuring (the backend's KernelCalibrator), a model for kernels
// that could not be measured (the analytical formula stays for those), or deciding that
// a cached time is stale (delete the file to measure again: its header says so).
//
//   AutoCalibration calibration(calibrator, /*cache_dir=*/"", &table);
//   MAGI_RETURN_IF_ERROR(calibration.Calibrate(graph));   // table now has every kernel of graph
//   std::fprintf(stderr, "%s\n", calibration.Summary().c_str());
#ifndef MAGI_COMPILER_AUTO_CALIBRATION_H_
#define MAGI_COMPILER_AUTO_CALIBRATION_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "magi/backend/kernel_calibrator.h"
#include "magi/cost/calibration.h"
#include "magi/cost/calibration_cache.h"
#include "magi/ir/graph.h"

namespace magi {

struct CalibrationStats {
  int kernels = 0;       // distinct keys looked at, over every Calibrate call
  int from_steps = 0;    // of those, timed from earlier runs' steps (step_time_feedback.h)
  int from_cache = 0;    // of those, timed from the micro-run cache file
  int measured = 0;      // measured by the calibrator
  int unmeasured = 0;    // neither: the cost model's formula times them
  int from_pinned = 0;   // timed from the pinned table (deterministic mode)
  double measure_seconds = 0;  // wall time of the calibrator's calls
  // The cached table this compile read times from, as a run summary names it: the pinned
  // table in deterministic mode, else the micro-run cache; and CalibrationCache::hash() of
  // what was read (the table of an empty file when there was none).
  std::string table_path;
  std::string table_hash;
  // CalibrationCache::HashOf the cost model's table after the last call: the times the
  // compile planned and predicted with.
  std::string planned_hash;
};

class AutoCalibration {
 public:
  // `calibrator` must not be null. `cache_dir` "" is CalibrationCache::DefaultDir().
  // `table` (the cost model's, not owned) must outlive this object. `deterministic`: plan
  // from the pinned table first and pin what it lacks (see above).
  AutoCalibration(std::shared_ptr<KernelCalibrator> calibrator, const std::string& cache_dir,
                  CalibrationTable* table, bool deterministic = false);

  // Gives `table` a time for every distinct kernel of `graph` it lacks (see above). A
  // cache file that cannot be written is a warning (warnings()), not an error: the times
  // serve this compile. Fails only when the calibrator does (ranks that cannot agree).
  absl::Status Calibrate(const Graph& graph);

  // Gives `table` a time for every distinct partition call of `graph` it lacks: the
  // magi::call nodes whose callee `callees` (by callee graph name, CompileContext's map)
  // holds a compiled executable, run by itself (KernelRequest::callee). The cost model
  // then times the partitioned step by what the partition backends compiled, not by the
  // ATen kernels they replaced, and counts the memory each compiled partition allocates
  // while it runs (CostModel::WorkingBytes; a cached time from before Magi measured that
  // keeps the callee-plan estimate until the cache file is deleted). Cached in the micro-run cache under the call's key plus
  // the executable's backend and code key (another compile of the same partition, e.g.
  // with other Inductor settings, is measured again; a backend whose executables give no
  // code key is trusted to compile a structure the same way each time); earlier runs'
  // steps are not used (they know the call by structure only). Calls without an
  // executable keep the cost model's formula (the sum of the callee's nodes). Same failure
  // rules as Calibrate.
  absl::Status CalibrateCalls(const Graph& graph, const std::map<std::string, std::shared_ptr<Executable>>& callees);

  const CalibrationStats& stats() const { return stats_; }
  const CalibrationCache& cache() const { return cache_; }
  const CalibrationCache& steps_cache() const { return steps_cache_; }
  // One line: "calibration (cpu ...): 93 kernels, 70 from earlier steps in PATH, 10
  // cached in PATH, 13 measured in 0.8 s; read PATH (table 0123456789abcdef), ...;
  // planned with table fedcba9876543210" (in deterministic mode "N pinned in PATH" first).
  std::string Summary() const;
  // What went wrong with the cache file (read or write), each once, in order.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // Asks the calibrator for `requests` (keys[i] is requests[i]'s) and records the times.
  // `cache_keys` (empty: `keys`) are where the micro-run cache files the times.
  absl::Status Measure(const std::vector<KernelRequest>& requests, const std::vector<std::string>& keys,
                       int* measured_now, const std::vector<std::string>& cache_keys = {});
  // Saves the micro-run cache after `measured_now` new times and the pinned table's new
  // entries (a failure is a warning).
  void SaveCache(int measured_now);

  std::shared_ptr<KernelCalibrator> calibrator_;
  CalibrationTable* table_;
  CalibrationCache cache_;
  CalibrationCache steps_cache_;  // read only here (StepTimeFeedback writes it)
  std::optional<CalibrationCache> pinned_;  // deterministic mode only
  std::set<std::string> known_from_steps_;  // keys whose cached time came from steps_cache_
  std::set<std::string> known_from_pinned_;  // keys (cache keys of calls) whose time came from pinned_
  CalibrationStats stats_;
  std::vector<std::string> warnings_;
  std::set<std::string> unmeasurable_;  // keys the calibrator returned no time for
};

}  // namespace magi

#endif  // MAGI_COMPILER_AUTO_CALIBRATION_H_
