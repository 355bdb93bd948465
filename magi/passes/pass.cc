#include "magi/passes/pass.h"

#include "absl/strings/str_cat.h"

namespace magi {

std::string Pass::Print() const {
  std::string options = PrintOptions();
  return options.empty() ? std::string(name()) : absl::StrCat(name(), "{", options, "}");
}

absl::StatusOr<bool> GraphPass::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    absl::StatusOr<bool> graph_changed = RunOnGraph(*graph);
    if (!graph_changed.ok()) return graph_changed.status();
    changed = *graph_changed || changed;
  }
  return changed;
}

}  // namespace magi
