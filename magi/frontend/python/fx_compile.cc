#include "magi/frontend/python/fx_compile.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/training/compile_for_torch.h"

namespace magi {

absl::StatusOr<std::unique_ptr<CompiledFxGraph>> CompiledFxGraph::Create(absl::string_view json,
                                                                         const FxGraphOptions& options,
                                                                         absl::string_view source) {
  MAGI_ASSIGN_OR_RETURN(FxImport imported, ImportFxJson(json, source));
  std::unique_ptr<CompiledFxGraph> graph(new CompiledFxGraph());
  for (const Value* input : imported.graph().inputs()) graph->input_names_.push_back(input->name());
  for (const GraphOutput& output : imported.graph().outputs()) graph->output_names_.push_back(output.name);
  CompileOptions compile = options.compile;
  if (options.calibration != "none" && options.calibration != "auto") {
    compile.cost_model.calibration_csv = options.calibration;
  }
  compile.partitioning.log = options.log;
  MAGI_ASSIGN_OR_RETURN(graph->compiled_, CompileForTorch(std::move(imported.module), imported.graph_name, compile,
                                                          &graph->executable_));
  // Sharding and the passes keep the graph's interface; the executable runs it in this order.
  const Graph& compiled = graph->compiled_.graph();
  if (compiled.inputs().size() != graph->input_names_.size() ||
      compiled.outputs().size() != graph->output_names_.size()) {
    return absl::InternalError(absl::StrCat(source, ": compiling changed the graph's interface (",
                                            graph->input_names_.size(), " inputs, ", graph->output_names_.size(),
                                            " outputs before; ", compiled.inputs().size(), " and ",
                                            compiled.outputs().size(), " after)"));
  }
  return graph;
}

absl::StatusOr<std::vector<at::Tensor>> CompiledFxGraph::Run(const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != input_names_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the graph takes ", input_names_.size(), " inputs, got ", inputs.size()));
  }
  return executable_->Run(inputs);
}

}  // namespace magi
