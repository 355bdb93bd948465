// What examples:train shows and writes, as strings (no LibTorch, no I/O): the progress line,
// the loss curve (loss.csv, loss.svg), the note a resume prints when the data changes, and
// summary.json. train.cc prints and writes them; the tests next to this file pin their format.
//
//   std::string line = magi::examples::ProgressLine({step + 1, steps, loss, tokens_per_s, eta, ""});
//   magi::WriteFileAtomically(dir + "/summary.json", magi::examples::SummaryJson(summary));
#ifndef MAGI_EXAMPLES_TRAIN_REPORT_H_
#define MAGI_EXAMPLES_TRAIN_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "magi/ir/graph.h"

namespace magi::examples {

// "m:ss", rounded to the second.
std::string Duration(double seconds);

struct Progress {
  int step = 0;  // 1-based: the step just taken
  int steps = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double eta_seconds = 0;
  std::string eager_note;  // appended as is (" | eager ..."), "" without --check_eager
};
// "step 3/200 | loss 4.5123 | 12345 tok/s | ETA 0:42".
std::string ProgressLine(const Progress& progress);
// Whether a non-terminal stderr gets the line of step `step` (0-based; a terminal gets every
// one, rewritten in place): every 10th, the first of the run, the last, and every one with
// --check_eager.
bool LogsProgress(int step, int first_step, int steps, bool every_step);

// (step, loss) points, steps 1-based.
using LossCurve = std::vector<std::pair<int, double>>;
std::string LossCsv(const LossCurve& curve);  // "step,loss\n1,5.123456\n..."
std::string LossSvg(const LossCurve& curve);  // a 640x360 line chart

// What a resume changes in the data, in one line ("" when nothing): the checkpoint was
// written by `saved_writers` ranks (one file each: the shard axis under HSDP) with
// `saved_global_batch` samples per step (0: not recorded); this run writes `writers` files
// and has `world` ranks of `local` samples, and trains steps first_step + 1 .. steps. The
// stream is indexed by step (token_batches.h), so a change only sets how many samples of
// each later step's draw are read.
std::string ResumeNote(int64_t saved_writers, int64_t saved_global_batch, int writers, int world, int local,
                       int first_step, int steps);

// summary.json of examples:train (docs/examples.md lists the members).
struct Summary {
  double initial_loss = 0, final_loss = 0;
  int steps = 0, world_size = 0;
  double tokens_per_s = 0;
  int64_t peak_memory_bytes = 0, predicted_peak_memory_bytes = 0;
  double step_seconds = 0, predicted_step_seconds = 0;
  int64_t memory_budget_bytes = 0;
  std::string pipeline, backend, model, dtype;
  int64_t tokens_per_step = 0;
  int timed_steps = 0;
  double host_seconds_per_step = 0;
  int64_t allocator_peak_bytes = -1;
  double compile_seconds = 0;
  int partitions = 0;
  bool deterministic = false;
  std::string plan_hash, calibration;
  int64_t calibrated_kernels_measured = 0, calibrated_kernels_cached = 0, calibrated_kernels_from_steps = 0,
          calibrated_kernels_pinned = 0;
  std::string calibration_table, calibration_table_hash, calibration_planned_hash;
  std::vector<double> timed_step_seconds;
  std::string energy_json;  // TimedEnergy::SummaryJson(): its members, without braces
  int64_t predicted_library_device_bytes = 0, library_device_bytes = 0;
  bool check_eager = false;
  double eager_max_relative_loss_difference = 0;  // only with check_eager; NaN and inf written as strings
  int64_t global_batch = 0;
  int resumed_from_step = -1;  // -1: not resumed
  int64_t resumed_world_size = 0, resumed_global_batch = 0;
  std::vector<double> losses;
};
std::string SummaryJson(const Summary& summary);  // one line, with a trailing newline

// "one step graph of 120 nodes (3 all-gathers, 3 reduce-scatters)".
std::string DescribeStepGraph(const Graph& graph);
// What the startup line says of --calibration: ", uncalibrated" (none), ", calibrated"
// (auto), ", calibrated by PATH".
std::string CalibrationNote(const std::string& calibration);
// What rank 0 prints once the step is compiled (CompileReport).
struct CompiledStep {
  std::string model;  // LlamaConfig::ToString()
  int64_t parameters = 0;
  int world_size = 0;
  std::string step_graph;  // DescribeStepGraph
  double compile_seconds = 0;
  std::string calibration_summary;  // the trainer's; "": no line
  std::string pipeline;             // the applied pipeline; "": (none)
  double predicted_step_seconds = 0;
  int64_t predicted_peak_bytes = 0;
  std::string device_profile;
  std::string calibration;  // --calibration (CalibrationNote)
  std::string plan_hash;
  std::string collectives;     // DescribeCollectives: "6 all-gathers (1.068 MB), ..."
  bool deterministic = false;  // the ranks agreed on the plan hash
};
// The startup lines: "magi: MODEL, P M parameters, W ranks; STEP GRAPH, compiled in S s", the
// calibration summary, "magi: pipeline ...; predicted step ..." and "magi: plan HASH: ... per step".
std::string CompileReport(const CompiledStep& step);
// The closing lines: "loss A -> B in N steps (S s, T tok/s); wrote DIR/{...}", the eager
// difference (with check_eager) and the GPU energy (when `energy_measured`).
std::string FinalReport(const Summary& summary, double seconds, const std::string& out_dir, bool energy_measured);
// "step graph: X ms measured (predicted Y), peak ... MB measured (predicted ...[; GEMM
// workspaces ...][, budget ...])".
std::string StepGraphReport(const Summary& summary);

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_REPORT_H_
