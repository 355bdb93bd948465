#include "magi/compiler/compiler.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/status_macros.h"
#include "magi/ir/verifier.h"
#include "magi/passes/auto_recompute_registration.h"
#include "magi/passes/batch_invariant.h"
#include "magi/passes/pipeline.h"
#include "magi/registry/registry.h"
#include "magi/search/strategy_search.h"

namespace magi {
namespace {

absl::Status RunPipeline(const std::string& text, const CostModel& model, Module& module) {
  MAGI_ASSIGN_OR_RETURN(PassPipeline pipeline, ParsePassPipeline(text));
  PassManager manager(/*verify_each=*/true);
  MAGI_RETURN_IF_ERROR(manager.AddPipeline(pipeline, [&model](const PassSpec& spec)
                                                         -> absl::StatusOr<std::unique_ptr<Pass>> {
    if (spec.name != "auto-recompute") return std::unique_ptr<Pass>();
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<AutoRecompute> pass, MakeAutoRecompute(spec.options, model));
    return std::unique_ptr<Pass>(std::move(pass));
  }));
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

}  // namespace

absl::StatusOr<CostModelBundle> MakeCostModel(const CostModelOptions& options) {
  CostModelBundle bundle;
  MAGI_ASSIGN_OR_RETURN(DeviceProfile profile, LoadDeviceProfile(options.device_profile));
  if (!options.calibration_csv.empty()) {
    MAGI_ASSIGN_OR_RETURN(CalibrationTable table, CalibrationTable::Load(options.calibration_csv));
    bundle.calibration = std::make_unique<CalibrationTable>(std::move(table));
  }
  bundle.model = std::make_unique<CostModel>(std::move(profile), bundle.calibration.get());
  return bundle;
}

absl::StatusOr<OptimizedStep> OptimizeStep(std::unique_ptr<Module> module, const std::string& graph_name,
                                           const CompileOptions& options, const CostModel& model) {
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
    BatchInvariant unroll(options.batch_invariant_sequences);
    MAGI_RETURN_IF_ERROR(unroll.Run(*module).status());
    MAGI_RETURN_IF_ERROR(VerifyModule(*module));
  }
  if (!optimization.canonicalize.empty()) MAGI_RETURN_IF_ERROR(RunPipeline(optimization.canonicalize, model, *module));
  OptimizedStep step;
  step.graph_name = graph_name;
  if (optimization.memory_budget_bytes > 0) {
    SearchOptions search = optimization.search;
    search.memory_budget_bytes = optimization.memory_budget_bytes;
    MAGI_ASSIGN_OR_RETURN(StrategyPlan plan, SearchStrategy(*module, graph_name, model, search));
    step.strategy_report = FormatStrategyPlan(plan);
    step.applied_pipeline = plan.pipeline;
    step.module = std::move(plan.optimized);  // what the search simulated, as it is
    MAGI_RETURN_IF_ERROR(VerifyModule(*step.module));
  } else {
    step.applied_pipeline = optimization.passes;
    if (!optimization.passes.empty()) MAGI_RETURN_IF_ERROR(RunPipeline(optimization.passes, model, *module));
    step.module = std::move(module);
  }
  MAGI_ASSIGN_OR_RETURN(step.prediction, Simulate(step.graph(), model));
  return step;
}

absl::StatusOr<CompiledStep> Compile(std::unique_ptr<Module> module, const std::string& graph_name,
                                     const CompileOptions& options) {
  MAGI_ASSIGN_OR_RETURN(CostModelBundle cost, MakeCostModel(options.cost_model));
  CompiledStep compiled;
  MAGI_ASSIGN_OR_RETURN(compiled.optimized, OptimizeStep(std::move(module), graph_name, options, *cost.model));
  Module& step_module = *compiled.optimized.module;
  Graph& graph = *step_module.FindGraph(graph_name);

  // Stage 4: partition backends first pick, in order; the primary backend runs the rest.
  std::map<std::string, std::unique_ptr<Backend>> partition_backends;
  MAGI_ASSIGN_OR_RETURN(auto primary_spec, ParseComponentSpec(options.backend));
  for (const std::string& spec : options.partitioning.backends) {
    MAGI_ASSIGN_OR_RETURN(auto parsed, ParseComponentSpec(spec));
    const std::string& name = parsed.first;
    if (name == primary_spec.first) continue;  // the primary takes whatever is left anyway
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, Registry<Backend>::Global().Create(name, parsed.second));
    Capability capability = backend->GetCapability(step_module, graph);
    MAGI_ASSIGN_OR_RETURN(std::vector<Partition> partitions,
                          OutlinePartitions(step_module, graph, name, capability, options.partitioning.min_nodes,
                                            options.partitioning.max_nodes));
    compiled.partitions.insert(compiled.partitions.end(), partitions.begin(), partitions.end());
    partition_backends[name] = std::move(backend);
  }
  MAGI_RETURN_IF_ERROR(VerifyModule(step_module));
  ComponentOptions primary_options = options.backend_options;
  primary_options.insert(primary_spec.second.begin(), primary_spec.second.end());
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Backend> primary,
                        Registry<Backend>::Global().Create(primary_spec.first, primary_options));
  MAGI_RETURN_IF_ERROR(CheckPrimaryCapability(*primary, step_module, graph));
  compiled.plan_hash = PlanHash(step_module, options);
  if (!options.expected_plan_hash.empty() && options.expected_plan_hash != compiled.plan_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the compiled plan of @", graph_name, " is ", compiled.plan_hash, ", not the expected ",
        options.expected_plan_hash, ": the model, world size, compile options or Magi version differ"));
  }

  // Stage 5: identical partitions share one executable.
  CompileContext context;
  context.deterministic = options.deterministic;
  std::map<std::string, std::shared_ptr<Executable>> by_key;
  for (const Partition& partition : compiled.partitions) {
    std::shared_ptr<Executable>& executable = by_key[partition.backend + "\n" + partition.structural_key];
    if (executable == nullptr) {
      const Graph* callee = step_module.FindGraph(partition.callee);
      CompileContext partition_context;
      partition_context.deterministic = options.deterministic;
      absl::StatusOr<std::unique_ptr<Executable>> built =
          partition_backends.at(partition.backend)->Compile(step_module, *callee, partition_context);
      if (!built.ok()) {
        return absl::Status(built.status().code(), absl::StrCat("backend '", partition.backend, "' on @",
                                                                partition.callee, ": ", built.status().message()));
      }
      executable = *std::move(built);
    }
    context.callees[partition.callee] = executable;
  }
  MAGI_ASSIGN_OR_RETURN(compiled.executable, primary->Compile(step_module, graph, context));
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
