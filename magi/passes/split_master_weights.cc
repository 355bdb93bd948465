#include "magi/passes/split_master_weights.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/ir/magi_ops.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

bool NoneOrAbsent(const Node& node, absl::string_view arg) {
  const Attribute* attr = node.FindArg(arg);
  return attr == nullptr || attr->is_none();
}

// aten::_to_copy(%param, dtype = bf16) and nothing else changed: the cast before a gather.
bool IsPlainBf16Cast(const Node& node, const Value* param) {
  if (node.op() != "aten::_to_copy" || node.num_operands() != 1 || node.operand(0) != param ||
      node.num_results() != 1) {
    return false;
  }
  const Attribute* dtype = node.FindArg("dtype");
  if (dtype == nullptr || dtype->kind() != AttrKind::kDType || dtype->as_dtype() != DType::kBFloat16) return false;
  for (absl::string_view arg : {"layout", "device", "pin_memory", "memory_format"}) {
    if (!NoneOrAbsent(node, arg)) return false;
  }
  const Type& result = node.result(0)->type();
  const TensorType& from = param->type().tensor();
  return result.is_tensor() && result.tensor().sizes == from.sizes && result.tensor().device == from.device &&
         result.tensor().strides.empty();
}

struct Candidate {
  Value* param = nullptr;
  std::vector<Node*> casts;
  Node* adamw = nullptr;
};

// Whether `param` is used as the pass needs (see the header); fills `candidate`.
bool Qualifies(const Graph& graph, Value* param, Candidate& candidate) {
  if (param->role() != InputRole::kParam || !param->type().is_tensor()) return false;
  const TensorType& type = param->type().tensor();
  if (type.dtype != DType::kFloat32 || !type.strides.empty()) return false;
  candidate = {param, {}, nullptr};
  for (const Use& use : param->uses()) {
    if (use.user->op() == kAdamWOp && use.operand_index == kAdamWParam && candidate.adamw == nullptr &&
        use.user->num_results() == 3) {
      candidate.adamw = use.user;
    } else if (IsPlainBf16Cast(*use.user, param)) {
      candidate.casts.push_back(use.user);
    } else {
      return false;
    }
  }
  if (candidate.adamw == nullptr || candidate.casts.empty()) return false;
  // The new parameter leaves the step and is read by nothing in it; nothing else returns
  // the parameter or writes over it.
  const Value* updated = candidate.adamw->result(0);
  if (updated->has_uses()) return false;
  for (const GraphOutput& output : graph.outputs()) {
    if (output.value == param) return false;  // returned as it is: the caller reads the f32
    if (output.aliases == param && output.value != updated) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> SplitMasterWeights::RunOnGraph(Graph& graph) {
  bool changed = false;
  std::vector<Candidate> candidates;
  for (Value* input : graph.inputs()) {
    Candidate candidate;
    if (Qualifies(graph, input, candidate)) candidates.push_back(std::move(candidate));
  }
  for (Candidate& c : candidates) {
    const std::string name = c.param->name();
    TensorType hi_type = c.param->type().tensor();
    hi_type.dtype = DType::kBFloat16;
    TensorType lo_type = c.param->type().tensor();
    lo_type.dtype = DType::kInt16;
    for (const std::string& half : {name + ".hi", name + ".lo"}) {
      if (graph.FindValue(half) != nullptr) {
        return absl::AlreadyExistsError(
            absl::StrCat("split-master-weights: @", graph.name(), " already has a value %", half));
      }
    }
    Value* hi = graph.AddInput(name + ".hi", Type::Tensor(hi_type), InputRole::kParam);
    Value* lo = graph.AddInput(name + ".lo", Type::Tensor(lo_type), InputRole::kParam);
    for (Node* cast : c.casts) {
      graph.ReplaceAllUsesWith(cast->result(0), hi);
      graph.EraseNode(cast);
    }
    MAGI_ASSIGN_OR_RETURN(Node * split, AddAdamWSplit(graph, hi, lo, *c.adamw, name, c.adamw));
    split->mutable_annotations() = c.adamw->annotations();
    graph.ReplaceAllUsesWith(c.adamw->result(1), split->result(2));
    graph.ReplaceAllUsesWith(c.adamw->result(2), split->result(3));
    // Each output of the new parameter becomes its two halves, in its place.
    std::vector<GraphOutput> outputs;
    for (const GraphOutput& output : graph.outputs()) {
      if (output.value != c.adamw->result(0)) {
        outputs.push_back(output);
        continue;
      }
      const bool donated = output.aliases == c.param;
      outputs.push_back({output.name + ".hi", split->result(0), donated ? hi : nullptr});
      outputs.push_back({output.name + ".lo", split->result(1), donated ? lo : nullptr});
    }
    while (!graph.outputs().empty()) graph.RemoveOutput(static_cast<int>(graph.outputs().size()) - 1);
    for (GraphOutput& output : outputs) graph.AddOutput(std::move(output.name), output.value, output.aliases);
    graph.EraseNode(c.adamw);
    graph.EraseInput(c.param);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(SplitMasterWeights);

}  // namespace magi
