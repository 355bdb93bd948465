// Compiles one ATen-level FX graph handed over in memory (the JSON of an FxExport message,
// fx_graph.proto, as tools/fx_export.py's serializer writes it) through the FX importer and
// the compile driver, and runs it on LibTorch tensors: the C++ half of
// torch.compile(backend="magi") (magi/frontend/python/magi/_dynamo_backend.py).
//
//   FxGraphOptions options;
//   options.compile.backend = "interpreter";
//   absl::StatusOr<std::unique_ptr<CompiledFxGraph>> graph = CompiledFxGraph::Create(json, options);
//   absl::StatusOr<std::vector<at::Tensor>> outputs = (*graph)->Run(inputs);   // input_names() order
//
// What it does NOT do: trace, guard or recompile (Dynamo does), shard (a graph compiled
// here runs on one device; magi.train shards), or calibrate kernels (the cost model uses
// the profile's formulas unless a CalibrationTable CSV is given).
#ifndef MAGI_FRONTEND_PYTHON_FX_COMPILE_H_
#define MAGI_FRONTEND_PYTHON_FX_COMPILE_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/training/step_options.h"

namespace magi {

struct FxGraphOptions {
  // How the graph is compiled, as every frontend takes it: the primary backend's spec
  // ("interpreter", "nccl_stream{cuda_graph=true}"), passes, memory budget, partitions,
  // deterministic mode, expected plan hash. Its cost model's calibration_csv comes from
  // `calibration` below.
  CompileOptions compile;
  // The cost model's measured times: "none" (the default) or a CalibrationTable CSV;
  // "auto" is read as "none" here: a graph compiled inside torch.compile is not measured.
  std::string calibration = "none";
  // Print what the driver decided (partitions, fallbacks) to stderr.
  bool log = false;
};

class CompiledFxGraph {
 public:
  // Imports `json` (errors name the FX node and why it was refused; `source` names the
  // graph in them) and compiles it.
  static absl::StatusOr<std::unique_ptr<CompiledFxGraph>> Create(absl::string_view json, const FxGraphOptions& options,
                                                                 absl::string_view source = "fx graph");

  // The graph's inputs and outputs by name, in the order Run takes and returns them
  // ("<input>.updated" outputs follow the FX graph's own for inputs the graph writes).
  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  // Runs the compiled graph; the inputs are not written.
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);

  const CompiledStep& compiled() const { return compiled_; }

 private:
  CompiledFxGraph() = default;
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;  // compiled_.executable, as a TorchExecutable
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_PYTHON_FX_COMPILE_H_
