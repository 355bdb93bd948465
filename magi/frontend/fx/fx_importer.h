// Imports PyTorch's own ATen-level FX graphs (make_fx, torch.export) into Magi IR.
//
// tools/fx_export.py writes NAME.fx.json (an FxExport message as protobuf JSON, see
// fx_graph.proto) and NAME.tensors (raw tensor bytes). The importer turns
//  - placeholders into named graph inputs (role param / buffer / data),
//  - placeholders with role "constant" (tensors made inside forward) into buffers,
//  - call_function nodes on ATen overloads into nodes whose arguments follow the
//    operator's schema in the LibTorch it runs on (missing optional arguments take the
//    schema's defaults; magi/frontend/common/aten_arguments.h, shared with capture), with
//    result types from the node's tensor metadata,
//  - operator.getitem into the selected result of a multi-output node,
//  - in-place ops (aten::add_, aten::relu_ ...) into their functional variants, and ops that
//    write arguments they do not return (2.x's _native_batch_norm_legit, _batch_norm_with_update)
//    into their "_functional" variants, which return the written values after their own, with
//    PyTorch's functionalization semantics (magi/frontend/common/alias_tracker.h): a write
//    to a view is written back into its base through the inverse view ops, other views
//    of that memory are regenerated from the new base, and a graph input written directly
//    or through a view becomes an extra output "<input>.updated" (BatchNorm running
//    statistics, buffers updated through a slice). Writes it cannot make exact (through
//    expand, or into memory that another tensor shares without being a known view, as the
//    file's storage ids tell) are errors naming the node,
//  - _c10d_functional / c10d_functional collectives (all_gather_into_tensor,
//    reduce_scatter_tensor, all_reduce, wait_tensor) into Magi's start/wait collectives
//    on a process group named after the FX group name,
//  - for joint graphs, phase annotations: forward up to the node that makes the loss (the
//    first output), backward after it,
// and verifies the result. Unknown targets, schema mismatches and malformed files are
// errors naming the node (and, for JSON, what the parser saw); never a crash.
#ifndef MAGI_FRONTEND_FX_FX_IMPORTER_H_
#define MAGI_FRONTEND_FX_FX_IMPORTER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/ir/module.h"

namespace magi {

struct FxImport {
  std::unique_ptr<Module> module;
  std::string graph_name;
  std::string kind;           // "forward" or "joint"
  std::string torch_version;  // of the exporter
  // Tensors of the side file: every graph input by name, and PyTorch's outputs as
  // "expected:<output name>" when the exporter recorded them.
  std::map<std::string, at::Tensor> tensors;

  const Graph& graph() const { return *module->FindGraph(graph_name); }
};

// Reads `json_path` and the tensors file it names.
absl::StatusOr<FxImport> ImportFxFile(const std::string& json_path);
// The graph alone, from JSON text (`source` names it in errors); no tensors are read.
absl::StatusOr<FxImport> ImportFxJson(absl::string_view json, absl::string_view source = "fx.json");

}  // namespace magi

#endif  // MAGI_FRONTEND_FX_FX_IMPORTER_H_
