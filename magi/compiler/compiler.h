// The compile driver: the one place where a captured step becomes an executable.
//
//   CompileOptions options;
//   options.sharding = fsdp_plan;                                   // FSDP (optional)
//   options.optimization.memory_budget_bytes = 40e9;                // or .passes = "..."
//   options.cost_model.device_profile = "h200";
//   options.backend = "interpreter";                                // runs the step
//   options.partitioning.backends = {"elementwise"};                // take what they accept
//   absl::StatusOr<CompiledStep> step = Compile(std::move(module), "train_step", options);
//
// Stages, in order:
//   1. shard: ShardForFsdp with `options.sharding`, then the verifier; with
//      `options.batch_invariant_sequences` > 1, the batch-invariant pass unrolls the
//      one-sequence graph to that many sequences (the all-gathers stay shared);
//   2. optimize: the canonicalization pipeline (elide-copies, slice-grads-to-cat, dce), with
//      optimization.weight_preparation concat-matmuls and the weight preparation moved to
//      a graph of its own (compile_options.h), calibration of the
//      step's kernels when a calibrator is given (auto_calibration.h), then the pass pipeline, or the strategy search under the memory budget; the
//      search hands back the very module it evaluated and predicted (no re-run from
//      text), and every pass that needs a cost model (auto-recompute) gets the same
//      CostModel object, calibration table included;
//   3. simulate: the cost model's prediction of the optimized graph (after calibrating
//      the kernels the optimization added, such as fused collectives);
//   4. partition: each partition backend in turn outlines the runs of compute nodes it
//      accepts (GetCapability) into graphs called through magi::call (partitioner.h);
//      the primary backend must accept everything left, else FailedPrecondition lists
//      what it declines and why;
//   5. backend compile: the distinct partitions of each partition backend at once
//      (Backend::CompileAll, which may compile them in parallel), then the step with the
//      primary backend, which receives the partitions' executables. A partition whose
//      compile fails is put back into the step (InlinePartition) for the primary backend,
//      with a warning naming it; so is every partition identical to it. Every backend is
//      told in CompileContext whether the step must be deterministic. The weight
//      preparation graph, if any, is compiled with the primary backend too.
// What each partition backend declined (counted by reason: "AOTInductor is unavailable:
// ..." when a backend cannot work here at all) and every fallback are CompiledStep::notes,
// printed to stderr unless options.partitioning.log is false.
// The plan hash (plan_hash.h) is computed after the fallbacks, of the module the primary
// backend then compiles, and checked against `options.expected_plan_hash` when one is given.
// No LibTorch: backends are found in the registry, and the Executable is abstract
// (frontends that run LibTorch tensors cast it to TorchExecutable).
#ifndef MAGI_COMPILER_COMPILER_H_
#define MAGI_COMPILER_COMPILER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/backend.h"
#include "magi/compiler/auto_calibration.h"
#include "magi/compiler/compile_options.h"
#include "magi/compiler/partitioner.h"
#include "magi/compiler/plan_hash.h"
#include "magi/cost/calibration.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/simulator.h"
#include "magi/ir/module.h"

namespace magi {

// A CostModel together with the calibration table it points to and, with a calibrator,
// what fills that table as the step is compiled.
struct CostModelBundle {
  std::shared_ptr<CalibrationTable> calibration;  // null without a table
  std::unique_ptr<AutoCalibration> auto_calibration;  // null without options.calibrator
  std::unique_ptr<CostModel> model;
};
// InvalidArgument when both a table and a calibrator are given; a table that does not
// parse fails naming its line. `deterministic` (CompileOptions::deterministic): the
// calibrator's times are planned from the pinned table (auto_calibration.h).
absl::StatusOr<CostModelBundle> MakeCostModel(const CostModelOptions& options, bool deterministic = false);

// The result of stages 1-3 (no backend involved).
struct OptimizedStep {
  std::shared_ptr<Module> module;  // the sharded, optimized module
  std::string graph_name;
  std::string applied_pipeline;  // "" if none
  std::string strategy_report;   // the search's table, when the search chose the pipeline
  SimulationResult prediction;   // of the optimized graph, before partitioning
  std::string calibration_summary;  // what calibration by default did ("" without it)
  CalibrationStats calibration_stats;
  // With optimization.weight_preparation: the graph of `module` that computes the step's
  // prepared weights from its parameters ("<graph_name>.prep"), or "" when there was
  // nothing to prepare.
  std::string prep_graph_name;
  const Graph& graph() const { return *module->FindGraph(graph_name); }
};

// Stages 1-3 on `module` (taken over) with `model` (nothing is measured).
absl::StatusOr<OptimizedStep> OptimizeStep(std::unique_ptr<Module> module, const std::string& graph_name,
                                           const CompileOptions& options, const CostModel& model);
// The same with `cost`'s model; with its auto_calibration, the step's kernels are
// calibrated after canonicalization (before the search or pipeline decides anything) and
// those of the optimized graph before the prediction.
absl::StatusOr<OptimizedStep> OptimizeStep(std::unique_ptr<Module> module, const std::string& graph_name,
                                           const CompileOptions& options, CostModelBundle& cost);

// A compiled step: the optimized module (its step graph calls the partition graphs),
// what the stages decided, and the executable.
struct CompiledStep {
  OptimizedStep optimized;
  std::vector<Partition> partitions;      // the partitions the step calls
  std::vector<Partition> fallen_back;     // outlined, failed to compile, put back into the step
  std::unique_ptr<Executable> executable;
  // PlanHash(module, options): equal hashes mean the same plan, options and Magi plan format.
  std::string plan_hash;
  // The executable of each partition, by callee graph (identical partitions share one).
  std::map<std::string, std::shared_ptr<Executable>> partition_executables;
  // What the driver reported: calibration, per partition backend what it took and
  // declined, fallbacks.
  std::vector<std::string> notes;
  // optimized.prep_graph_name compiled with the primary backend (null without one): run it
  // on the parameters it reads, by name, whenever they change, and bind its outputs to the
  // step's inputs of the same names.
  std::unique_ptr<Executable> prep_executable;
  // The step as it runs: the partitioned step graph simulated, each partition call timed
  // by its compiled partition run by itself (calibration by default,
  // AutoCalibration::CalibrateCalls; without calibration, by its nodes' times summed).
  // Its peak is the partitioned graph's: each call keeps its operands live and, while it
  // runs, holds what its compiled code allocates (measured with its time: the CUDA
  // caching allocator's peak over a run, or the executable's own count; else its callee's
  // nodes planned one by one: CostModel::WorkingBytes). optimized.prediction when nothing
  // was outlined.
  SimulationResult prediction;
  // The measured times the search and the predictions used (null: the formulas alone);
  // Simulate(graph-before-partitioning, CostModel(profile, calibration.get())) reproduces
  // optimized.prediction, Simulate(graph(), ...) prediction (time and peak).
  std::shared_ptr<const CalibrationTable> calibration;
  const Module& module() const { return *optimized.module; }
  const Graph& graph() const { return optimized.graph(); }
};

// Stages 1-5 (see above).
absl::StatusOr<CompiledStep> Compile(std::unique_ptr<Module> module, const std::string& graph_name,
                                     const CompileOptions& options);

// One line per partition ("@train_step.elementwise.0  elementwise  12 nodes"), and how
// many distinct executables they needed.
std::string FormatPartitions(const std::vector<Partition>& partitions);

}  // namespace magi

#endif  // MAGI_COMPILER_COMPILER_H_
