#include "magi/passes/dce.h"

#include <memory>

#include "absl/container/flat_hash_set.h"
#include "magi/ir/collectives.h"
#include "magi/registry/registry.h"

namespace magi {

bool DeadCodeElimination::HasSideEffects(absl::string_view op) {
  size_t name_start = op.find("::");
  absl::string_view name = name_start == absl::string_view::npos ? op : op.substr(name_start + 2);
  size_t dot = name.find('.');
  absl::string_view base = dot == absl::string_view::npos ? name : name.substr(0, dot);
  absl::string_view overload = dot == absl::string_view::npos ? absl::string_view() : name.substr(dot + 1);
  // ATen marks in-place ops with a trailing '_' (add_); a leading one (_to_copy) only marks private ops.
  bool in_place = base.size() > 1 && base.back() == '_';
  // Batch norm in training writes its running statistics inside the kernel, without an
  // alias annotation in LibTorch 1.13's schema; never drop, merge or re-run it.
  bool writes_running_stats = base == "native_batch_norm" || base == "_native_batch_norm_legit" ||
                              base == "cudnn_batch_norm" || base == "miopen_batch_norm" ||
                              base == "_batch_norm_impl_index" || base == "batch_norm";
  return in_place || writes_running_stats || overload == "out" || overload.substr(0, 4) == "out_";
}

absl::StatusOr<bool> DeadCodeElimination::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    absl::flat_hash_set<const Value*> outputs;
    for (const GraphOutput& output : graph->outputs()) outputs.insert(output.value);
    std::vector<Node*> nodes = graph->nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* node = *it;
      if (HasSideEffects(node->op())) continue;
      bool dead = true;
      for (const Value* result : node->results()) {
        if (result->has_uses() || outputs.contains(result)) dead = false;
      }
      // A start is dead only when its wait is already gone (it then has no uses).
      if (!dead) continue;
      graph->EraseNode(node);
      changed = true;
    }
  }
  return changed;
}

MAGI_REGISTER(Pass, "dce", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
  if (!options.empty()) return absl::InvalidArgumentError("dce takes no options");
  return std::make_unique<DeadCodeElimination>();
});

}  // namespace magi
