#include "magi/compiler/compiler.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "magi/base/status_macros.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/verifier.h"
#include "magi/passes/align_collectives.h"
#include "magi/passes/concat_matmuls.h"
#include "magi/passes/hoist_weight_preparation.h"
#include "magi/passes/recompute_fusible.h"
#include "magi/passes/batch_invariant.h"
#include "magi/passes/pipeline.h"
#include "magi/registry/registry.h"
#include "magi/search/auto_recompute_registration.h"
#include "magi/search/strategy_search.h"

namespace magi {
namespace {

// Whether `text` is printed for the first time in this process. A process that compiles
// many steps (a test, a sweep) would otherwise repeat the same calibration-cache warning at
// every compile; CompiledStep::notes still holds it every time.
bool FirstTimeInProcess(const std::string& text) {
  static absl::Mutex mutex(absl::kConstInit);
  static auto* printed = new absl::flat_hash_set<std::string>();
  absl::MutexLock lock(&mutex);
  return printed->insert(text).second;
}

absl::Status RunPipeline(const std::string& text, const CostModel& model, Module& module) {
  MAGI_ASSIGN_OR_RETURN(PassPipeline pipeline, ParsePassPipeline(text));
  PassManager manager(/*verify_each=*/true);
  MAGI_RETURN_IF_ERROR(manager.AddPipeline(pipeline, AutoRecomputeWithCostModel(model)));
  return manager.Run(module).status();
}

// Stage 4's check: everything left must run on the primary backend.
absl::Status CheckPrimaryCapability(const Backend& backend, const Module& module, const Graph& graph) {
  Capability capability = backend.GetCapability(module, graph);
  if (capability.supports_all()) return absl::OkStatus();
  std::string message = absl::StrCat("backend '", backend.name(), "' cannot run ", capability.unsupported.size(),
                                     " node(s) of @", graph.name(), ":");
  for (size_t i = 0; i < capability.unsupported.size() && i < 5; ++i) {
    absl::StrAppend(&message, "\n  ", capability.unsupported[i].first->DebugName(), ": ",
                    capability.unsupported[i].second);
  }
  if (capability.unsupported.size() > 5) absl::StrAppend(&message, "\n  ...");
  return absl::FailedPreconditionError(message);
}

// One line: what partition backend `name` took of `graph` and, by reason, what it declined.
std::string DescribeCapability(const std::string& name, const std::string& primary, const std::string& graph,
                               int num_nodes, const Capability& capability, const std::vector<Partition>& partitions) {
  int outlined = 0;
  std::set<std::string> distinct;
  for (const Partition& partition : partitions) {
    outlined += partition.num_nodes;
    distinct.insert(partition.structural_key);
  }
  std::string text = absl::StrFormat("partition backend '%s': %d of the %d nodes of @%s in %d partitions (%d distinct)",
                                     name, outlined, num_nodes, graph, partitions.size(), distinct.size());
  if (capability.unsupported.empty()) return text;
  std::map<std::string, int> count_of;
  for (const auto& [node, reason] : capability.unsupported) ++count_of[reason];
  std::vector<std::pair<int, std::string>> reasons;
  for (const auto& [reason, count] : count_of) reasons.emplace_back(-count, reason);
  std::sort(reasons.begin(), reasons.end());
  if (static_cast<int>(capability.unsupported.size()) == num_nodes && reasons.size() == 1) {
    return absl::StrCat(text, "; it declines every node: ", reasons[0].second, "; the primary backend '", primary,
                        "' runs them");
  }
  absl::StrAppend(&text, "; declines ", capability.unsupported.size(), ":");
  for (size_t i = 0; i < reasons.size() && i < 4; ++i) {
    absl::StrAppend(&text, i == 0 ? " " : "; ", -reasons[i].first, " x ", reasons[i].second);
  }
  if (reasons.size() > 4) absl::StrAppend(&text, "; and ", reasons.size() - 4, " other reasons");
  return text;
}

}  // namespace

absl::StatusOr<CostModelBundle> MakeCostModel(const CostModelOptions& options, bool deterministic) {
  CostModelBundle bundle;
  MAGI_ASSIGN_OR_RETURN(DeviceProfile profile, LoadDeviceProfile(options.device_profile));
  if (!options.calibration_csv.empty() && options.calibrator != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("give a calibration table (", options.calibration_csv,
                                                   ") or a calibrator that measures one, not both"));
  }
  if (!options.calibration_csv.empty()) {
    MAGI_ASSIGN_OR_RETURN(CalibrationTable table, CalibrationTable::Load(options.calibration_csv));
    bundle.calibration = std::make_shared<CalibrationTable>(std::move(table));
  } else if (options.calibrator != nullptr) {
    bundle.calibration = std::make_shared<CalibrationTable>();
    bundle.auto_calibration = std::make_unique<AutoCalibration>(options.calibrator, options.calibration_cache_dir,
                                                                bundle.calibration.get(), deterministic);
  }
  bundle.model = std::make_unique<CostModel>(std::move(profile), bundle.calibration.get());
  return bundle;
}

namespace {

absl::StatusOr<OptimizedStep> OptimizeStepImpl(std::unique_ptr<Module> module, const std::string& graph_name,
                                               const CompileOptions& options, const CostModel& model,
                                               AutoCalibration* calibration) {
  if (module == nullptr) return absl::InvalidArgumentError("no module to compile");
  Graph* graph = module->FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("module @", module->name(), " has no graph @", graph_name));
  const OptimizationOptions& optimization = options.optimization;
  if (!optimization.passes.empty() && optimization.memory_budget_bytes > 0) {
    return absl::InvalidArgumentError(
        "give either a pass pipeline or a memory budget for the strategy search, not both");
  }
  if (options.sharding) {
    MAGI_RETURN_IF_ERROR(ShardForFsdp(*module, *graph, *options.sharding));
    MAGI_RETURN_IF_ERROR(VerifyModule(*module));
  }
  if (options.batch_invariant_sequences > 1) {
    // After sharding, so the parameter all-gathers stay once for all sequences.
    BatchInvariantOptions unroll_options;
    unroll_options.batch = options.batch_invariant_sequences;
    BatchInvariant unroll(unroll_options);
    MAGI_RETURN_IF_ERROR(unroll.Run(*module).status());
    MAGI_RETURN_IF_ERROR(VerifyModule(*module));
  }
  if (!optimization.canonicalize.empty()) MAGI_RETURN_IF_ERROR(RunPipeline(optimization.canonicalize, model, *module));
  std::string prep_graph_name;
  if (optimization.weight_preparation) {
    // Before anything plans the step: the search and the prediction see the step as it
    // runs, without the work done once per weight change.
    ConcatMatmuls concat;
    MAGI_RETURN_IF_ERROR(concat.Run(*module).status());
    MAGI_ASSIGN_OR_RETURN(prep_graph_name, HoistWeightPreparation(*module, graph_name));
    MAGI_RETURN_IF_ERROR(VerifyModule(*module));
  }
  // Measured before anything is decided with the model (the search, auto-recompute).
  if (calibration != nullptr) MAGI_RETURN_IF_ERROR(calibration->Calibrate(*graph));
  OptimizedStep step;
  step.graph_name = graph_name;
  step.prep_graph_name = prep_graph_name;
  if (optimization.memory_budget_bytes > 0) {
    MAGI_ASSIGN_OR_RETURN(StrategyPlan plan, SearchStrategy(*module, graph_name, model,
                                                            optimization.memory_budget_bytes, optimization.search));
    step.strategy_report = FormatStrategyPlan(plan);
    step.applied_pipeline = plan.pipeline;
    step.module = std::move(plan.optimized);  // what the search simulated, as it is
    MAGI_RETURN_IF_ERROR(VerifyModule(*step.module));
  } else {
    step.applied_pipeline = optimization.passes;
    if (!optimization.passes.empty()) MAGI_RETURN_IF_ERROR(RunPipeline(optimization.passes, model, *module));
    step.module = std::move(module);
  }
  if (calibration != nullptr) {
    // What the optimization added (fused collectives, new shapes) is measured too, so the
    // prediction times every kernel the step runs.
    MAGI_RETURN_IF_ERROR(calibration->Calibrate(step.graph()));
    step.calibration_summary = calibration->Summary();
    step.calibration_stats = calibration->stats();
  }
  MAGI_ASSIGN_OR_RETURN(step.prediction, Simulate(step.graph(), model));
  return step;
}

// The nodes a partition backend declines (kernel boundaries for the passes before the cut).
absl::flat_hash_set<const Node*> DeclinedNodes(const Capability& capability) {
  absl::flat_hash_set<const Node*> declined;
  for (const auto& [node, reason] : capability.unsupported) declined.insert(node);
  return declined;
}

// Before the first partition backend cuts `graph`: collectives out of the chains it would
// fuse (align_collectives.h), with what it declines as kernel boundaries. The moves change
// when collectives run and so what is live when: the prediction is made again, and under a
// memory budget a plan that no longer fits is put back as it was.
absl::Status AlignBeforePartitioning(Graph& graph, const std::string& backend, const Capability& capability,
                                     const CompileOptions& options, const CostModel& model,
                                     SimulationResult& prediction, const std::function<void(std::string)>& note) {
  const absl::flat_hash_set<const Node*> declined = DeclinedNodes(capability);
  const std::vector<Node*> before = graph.nodes();
  std::vector<int64_t> schedule;
  for (const Node* node : before) schedule.push_back(node->annotations().schedule);
  const int moves = AlignCollectives(graph, AlignCollectivesPass::kDefaultMaxNodes,
                                     [&declined](const Node& node) { return declined.contains(&node); });
  if (moves == 0) return absl::OkStatus();
  MAGI_ASSIGN_OR_RETURN(SimulationResult aligned, Simulate(graph, model));
  const int64_t budget = options.optimization.memory_budget_bytes;
  std::string why_not;
  if (budget > 0 && aligned.peak_bytes > budget && aligned.peak_bytes > prediction.peak_bytes) {
    why_not = absl::StrCat("its predicted peak ", aligned.peak_bytes, " bytes exceeds the budget of ", budget, " bytes");
  } else if (aligned.step_seconds > prediction.step_seconds * 1.001 + 1e-5) {
    // The pass moves only collectives that keep their overlap; the cost model (which does
    // not model fusion) must agree, or the moves are not worth it.
    why_not = absl::StrFormat("the predicted step would take %.3f ms, not %.3f", aligned.step_seconds * 1e3,
                              prediction.step_seconds * 1e3);
  }
  if (!why_not.empty()) {
    for (size_t i = 0; i < before.size(); ++i) {
      graph.MoveBefore(before[i], nullptr);
      before[i]->mutable_annotations().schedule = schedule[i];
    }
    note(absl::StrCat("align-collectives: not applied to @", graph.name(), ": ", why_not));
    return absl::OkStatus();
  }
  prediction = aligned;
  note(absl::StrCat("align-collectives: ", moves, " moves of collectives to kernel boundaries of @", graph.name(),
                    " before partitioning for '", backend, "'"));
  return absl::OkStatus();
}

// Before the first partition backend cuts `graph`: its fusible activations recomputed for
// the backward (recompute_fusible.h), with what it declines as kernel boundaries. The
// copies read values saved anyway, but may keep one alive up to the copy: a rewrite whose
// planned peak is higher is taken back. The ATen plan's time goes up by the copies, which
// the backend fuses away (the partitioned prediction times that).
absl::Status RecomputeFusibleBeforePartitioning(Graph& graph, const std::string& backend, const Capability& capability,
                                                const CostModel& model, SimulationResult& prediction,
                                                const std::function<void(std::string)>& note) {
  const absl::flat_hash_set<const Node*> declined = DeclinedNodes(capability);
  const int64_t peak_before = prediction.peak_bytes;
  RecomputeUndo undo;
  const int chosen =
      RecomputeFusible(graph, [&declined](const Node& node) { return declined.contains(&node); }, &undo);
  if (chosen == 0) return absl::OkStatus();
  MAGI_ASSIGN_OR_RETURN(SimulationResult recomputed, Simulate(graph, model));
  if (recomputed.peak_bytes > peak_before) {
    UndoRecompute(graph, undo);
    note(absl::StrFormat("recompute-fusible: not applied to @%s: its planned peak would grow from %.3f to %.3f GB",
                         graph.name(), peak_before / 1e9, recomputed.peak_bytes / 1e9));
    return absl::OkStatus();
  }
  prediction = std::move(recomputed);
  note(absl::StrFormat("recompute-fusible: %d activations of @%s recomputed in the backward for '%s' to fuse; "
                       "planned peak %.3f -> %.3f GB",
                       chosen, graph.name(), backend, peak_before / 1e9, prediction.peak_bytes / 1e9));
  return absl::OkStatus();
}

// CompiledStep::prediction: the step with its partitions as compiled. Fused partitions
// run faster than the ATen kernels they replace (the 953M step on an H200: 118 ms
// predicted from those kernels, 90 ms measured), so each distinct compiled partition is
// timed by itself and the partitioned graph simulated again. Every rank calls the
// calibrator here whenever partition backends were asked for (all ranks compile with the
// same options), so none is left waiting in its exchange.
absl::Status PredictPartitionedStep(const Graph& graph, const CompileOptions& options, CostModelBundle& cost,
                                    CompiledStep& compiled, const std::function<void(std::string)>& note) {
  compiled.prediction = compiled.optimized.prediction;
  if (options.partitioning.backends.empty()) return absl::OkStatus();
  if (cost.auto_calibration != nullptr) {
    MAGI_RETURN_IF_ERROR(cost.auto_calibration->CalibrateCalls(graph, compiled.partition_executables));
    compiled.optimized.calibration_summary = cost.auto_calibration->Summary();
    compiled.optimized.calibration_stats = cost.auto_calibration->stats();
  }
  if (compiled.partitions.empty()) return absl::OkStatus();
  absl::StatusOr<SimulationResult> partitioned = Simulate(graph, *cost.model);
  if (!partitioned.ok()) {
    note(absl::StrCat("warning: the partitioned step could not be simulated (the prediction stays the plan's): ",
                      partitioned.status().message()));
    compiled.prediction.events.clear();  // they, and the peak node, index the graph before partitioning
    compiled.prediction.peak_node = -1;
    return absl::OkStatus();
  }
  std::set<std::string> distinct, measured, memory_measured;
  for (const Node* node : graph.nodes()) {
    if (node->op() != kCallOp) continue;
    const std::string key = CalibrationTable::KeyOf(*node);
    distinct.insert(key);
    if (cost.calibration != nullptr && cost.calibration->Find(key)) measured.insert(key);
    if (cost.calibration != nullptr && cost.calibration->FindWorkingBytes(key)) memory_measured.insert(key);
  }
  // The peak is the partitioned graph's: each call holds its operands, and while it runs
  // what its compiled code allocates (CostModel::WorkingBytes: measured with its time, else
  // its callee's nodes planned one by one).
  if (cost.auto_calibration != nullptr) note(absl::StrFormat(
      "predicted step with the compiled partitions: %.1f ms (%d of %d distinct partitions timed as compiled%s); "
      "%.1f ms by the kernels they replace; peak %.3f GB (%d of %d partitions' memory measured), %.3f GB by the plan",
      partitioned->step_seconds * 1e3, measured.size(), distinct.size(),
      measured.size() < distinct.size() ? ", the others by their nodes' times" : "",
      compiled.optimized.prediction.step_seconds * 1e3, partitioned->peak_bytes / 1e9, memory_measured.size(),
      distinct.size(), compiled.optimized.prediction.peak_bytes / 1e9));
  compiled.prediction = *std::move(partitioned);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OptimizedStep> OptimizeStep(std::unique_ptr<Module> module, const std::string& graph_name,
                                           const CompileOptions& options, const CostModel& model) {
  return OptimizeStepImpl(std::move(module), graph_name, options, model, /*calibration=*/nullptr);
}

absl::StatusOr<OptimizedStep> OptimizeStep(std::unique_ptr<Module> module, const std::string& graph_name,
                                           const CompileOptions& options, CostModelBundle& cost) {
  if (cost.model == nullptr) return absl::InvalidArgumentError("no cost model");
  return OptimizeStepImpl(std::move(module), graph_name, options, *cost.model, cost.auto_calibration.get());
}

// Partition backends leave to the primary backend every node that writes a donated
// input's new value from that input (GraphOutput::aliases: a KV cache's update): the
// primary updates the input in place, where a partition would return a new buffer and
// cost a copy of the whole input each run (under a CUDA graph, one into its static input).
// Except where the partition backend updates the input in place itself
// (Backend::UpdatesDonatedInputInPlace: Inductor's index_put, fused into the kernel that
// makes the new values) and the node is the input's only reader, so nothing outside the
// partition reads the old value after it.
static void DeclineDonatedUpdates(const Graph& graph, const Backend& backend, Capability& capability) {
  absl::flat_hash_map<const Value*, const Value*> donated;  // output value -> the input it reuses
  for (const GraphOutput& output : graph.outputs()) {
    if (output.aliases != nullptr) donated[output.value] = output.aliases;
  }
  if (donated.empty()) return;
  absl::flat_hash_set<const Node*> declined;
  for (const auto& [node, reason] : capability.unsupported) declined.insert(node);
  for (const Node* node : graph.nodes()) {
    if (declined.count(node)) continue;
    for (const Value* result : node->results()) {
      auto it = donated.find(result);
      if (it == donated.end()) continue;
      bool reads_it = false;
      for (const Value* operand : node->operands()) reads_it = reads_it || operand == it->second;
      if (!reads_it) continue;
      if (it->second->uses().size() == 1 && backend.UpdatesDonatedInputInPlace(*node)) break;
      capability.unsupported.emplace_back(
          node, "writes a donated input's new value: the primary backend updates it in place");
      break;
    }
  }
}

absl::StatusOr<CompiledStep> Compile(std::unique_ptr<Module> module, const std::string& graph_name,
                                     const CompileOptions& options) {
  MAGI_ASSIGN_OR_RETURN(CostModelBundle cost, MakeCostModel(options.cost_model, options.deterministic));
  CompiledStep compiled;
  MAGI_ASSIGN_OR_RETURN(compiled.optimized, OptimizeStep(std::move(module), graph_name, options, cost));
  compiled.calibration = cost.calibration;
  Module& step_module = *compiled.optimized.module;
  Graph& graph = *step_module.FindGraph(graph_name);
  // Kept in the notes every time; printed (with logging on) once per process where `once`.
  auto note = [&](std::string text, bool once = false) {
    if (options.partitioning.log && (!once || FirstTimeInProcess(text))) {
      std::fprintf(stderr, "magi: %s\n", text.c_str());
    }
    compiled.notes.push_back(std::move(text));
  };
  if (cost.auto_calibration != nullptr) {
    for (const std::string& warning : cost.auto_calibration->warnings()) note(warning, /*once=*/true);
  }

  // Stage 4: partition backends first pick, in order; the primary backend runs the rest.
  std::map<std::string, std::unique_ptr<Backend>> partition_backends;
  MAGI_ASSIGN_OR_RETURN(auto primary_spec, ParseComponentSpec(options.backend));
  for (const std::string& spec : options.partitioning.backends) {
    MAGI_ASSIGN_OR_RETURN(auto parsed, ParseComponentSpec(spec));
    const std::string& name = parsed.first;
    if (name == primary_spec.first) continue;  // the primary takes whatever is left anyway
    auto extra = options.partitioning.backend_options.find(name);
    if (extra != options.partitioning.backend_options.end()) parsed.second.insert(extra->second.begin(), extra->second.end());
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, Registry<Backend>::Global().Create(name, parsed.second));
    int nodes_before = graph.num_nodes();
    Capability capability = backend->GetCapability(step_module, graph);
    DeclineDonatedUpdates(graph, *backend, capability);
    if (options.partitioning.align_collectives && partition_backends.empty()) {
      MAGI_RETURN_IF_ERROR(AlignBeforePartitioning(graph, name, capability, options, *cost.model,
                                                   compiled.optimized.prediction, note));
    }
    if (options.partitioning.recompute_fusible && partition_backends.empty()) {
      MAGI_RETURN_IF_ERROR(RecomputeFusibleBeforePartitioning(graph, name, capability, *cost.model,
                                                              compiled.optimized.prediction, note));
      capability = backend->GetCapability(step_module, graph);  // the copies are new nodes
      DeclineDonatedUpdates(graph, *backend, capability);
    }
    MAGI_ASSIGN_OR_RETURN(std::vector<Partition> partitions,
                          OutlinePartitions(step_module, graph, name, capability, options.partitioning.min_nodes,
                                            options.partitioning.max_nodes));
    note(DescribeCapability(name, primary_spec.first, graph.name(), nodes_before, capability, partitions));
    compiled.partitions.insert(compiled.partitions.end(), partitions.begin(), partitions.end());
    partition_backends[name] = std::move(backend);
  }
  MAGI_RETURN_IF_ERROR(VerifyModule(step_module));
  ComponentOptions primary_options = options.backend_options;
  primary_options.insert(primary_spec.second.begin(), primary_spec.second.end());
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Backend> primary,
                        Registry<Backend>::Global().Create(primary_spec.first, primary_options));
  MAGI_RETURN_IF_ERROR(CheckPrimaryCapability(*primary, step_module, graph));

  // Stage 5: each backend compiles its distinct partitions at once; identical partitions
  // share one executable; a partition that fails goes back into the step.
  std::map<std::string, std::shared_ptr<Executable>> by_key;
  std::map<std::string, std::string> failed_by_key;
  CompileContext partition_context;
  partition_context.deterministic = options.deterministic;
  for (const auto& [name, backend] : partition_backends) {
    std::vector<const Graph*> graphs;
    std::vector<std::string> keys;
    for (const Partition& partition : compiled.partitions) {
      std::string key = partition.backend + "\n" + partition.structural_key;
      if (partition.backend != name || by_key.count(key) > 0) continue;
      by_key[key] = nullptr;
      graphs.push_back(step_module.FindGraph(partition.callee));
      keys.push_back(std::move(key));
    }
    if (graphs.empty()) continue;
    std::vector<absl::StatusOr<std::unique_ptr<Executable>>> built =
        backend->CompileAll(step_module, graphs, partition_context);
    if (built.size() != graphs.size()) {
      return absl::InternalError(absl::StrCat("backend '", name, "' compiled ", built.size(), " of ", graphs.size(),
                                              " partitions"));
    }
    for (size_t i = 0; i < graphs.size(); ++i) {
      if (built[i].ok()) {
        by_key[keys[i]] = *std::move(built[i]);
      } else {
        failed_by_key[keys[i]] = std::string(built[i].status().message());
      }
    }
  }
  std::vector<Partition> kept;
  for (Partition& partition : compiled.partitions) {
    auto failed = failed_by_key.find(partition.backend + "\n" + partition.structural_key);
    if (failed == failed_by_key.end()) {
      compiled.partition_executables[partition.callee] = by_key.at(partition.backend + "\n" + partition.structural_key);
      kept.push_back(std::move(partition));
      continue;
    }
    note(absl::StrCat("warning: partition @", partition.callee, " (", partition.num_nodes, " nodes) failed to compile on backend '",
                      partition.backend, "'; the primary backend '", primary_spec.first, "' runs its nodes: ",
                      failed->second));
    MAGI_RETURN_IF_ERROR(InlinePartition(step_module, graph, partition.callee));
    compiled.fallen_back.push_back(std::move(partition));
  }
  compiled.partitions = std::move(kept);
  if (!compiled.fallen_back.empty()) {
    MAGI_RETURN_IF_ERROR(VerifyModule(step_module));
    MAGI_RETURN_IF_ERROR(CheckPrimaryCapability(*primary, step_module, graph));
  }
  MAGI_RETURN_IF_ERROR(PredictPartitionedStep(graph, options, cost, compiled, note));
  // The plan is final here (fallbacks included): what the primary backend compiles.
  compiled.plan_hash = PlanHash(step_module, options);
  if (!options.expected_plan_hash.empty() && options.expected_plan_hash != compiled.plan_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the compiled plan of @", graph_name, " is ", compiled.plan_hash, ", not the expected ",
        options.expected_plan_hash, ": the model, world size, compile options or Magi version differ"));
  }
  CompileContext context;
  context.callees = compiled.partition_executables;
  context.deterministic = options.deterministic;
  MAGI_ASSIGN_OR_RETURN(compiled.executable, primary->Compile(step_module, graph, context));
  if (!compiled.optimized.prep_graph_name.empty()) {
    CompileContext prep_context;
    prep_context.deterministic = options.deterministic;
    MAGI_ASSIGN_OR_RETURN(compiled.prep_executable,
                          primary->Compile(step_module, *step_module.FindGraph(compiled.optimized.prep_graph_name),
                                           prep_context));
  }
  return compiled;
}

std::string FormatPartitions(const std::vector<Partition>& partitions) {
  std::set<std::string> distinct;
  std::string out;
  for (const Partition& partition : partitions) {
    distinct.insert(partition.backend + "\n" + partition.structural_key);
    absl::StrAppendFormat(&out, "@%s  %s  %d nodes\n", partition.callee, partition.backend, partition.num_nodes);
  }
  absl::StrAppendFormat(&out, "%d partitions, %d distinct\n", partitions.size(), distinct.size());
  return out;
}

}  // namespace magi
