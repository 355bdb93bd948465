#include "magi/training/compile_for_torch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {

absl::StatusOr<CompiledStep> CompileForTorch(std::unique_ptr<Module> module, const std::string& graph_name,
                                             const CompileOptions& options, TorchExecutable** executable) {
  MAGI_ASSIGN_OR_RETURN(CompiledStep compiled, Compile(std::move(module), graph_name, options));
  *executable = dynamic_cast<TorchExecutable*>(compiled.executable.get());
  if (*executable == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend '", options.backend, "' does not run LibTorch tensors"));
  }
  return compiled;
}

}  // namespace magi
