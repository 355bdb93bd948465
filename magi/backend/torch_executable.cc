#include "magi/backend/torch_executable.h"

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/registry/registry.h"

namespace magi {

absl::StatusOr<std::unique_ptr<TorchExecutable>> CompileForTorch(absl::string_view backend, const Module& module,
                                                                 absl::string_view graph_name) {
  const Graph* graph = module.FindGraph(graph_name);
  if (graph == nullptr) return absl::NotFoundError(absl::StrCat("module @", module.name(), " has no graph @", graph_name));
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Backend> instance, Registry<Backend>::Global().Create(backend));
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Executable> executable, instance->Compile(module, *graph));
  auto* torch_executable = dynamic_cast<TorchExecutable*>(executable.get());
  if (torch_executable == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("backend '", backend, "' does not run LibTorch tensors"));
  }
  executable.release();
  return std::unique_ptr<TorchExecutable>(torch_executable);
}

}  // namespace magi
