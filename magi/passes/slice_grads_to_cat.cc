#include "magi/passes/slice_grads_to_cat.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"

#include "magi/registry/registry.h"

namespace magi {
namespace {

// A slice_backward(grad, sizes, dim, start, end, 1) as the range it fills.
struct SliceFill {
  Value* grad = nullptr;
  std::vector<int64_t> sizes;
  int64_t dim = 0;
  int64_t start = 0;
  int64_t end = 0;
};

std::optional<SliceFill> AsSliceFill(const Value* value) {
  const Node* node = value->producer();
  if (node == nullptr || node->op() != "aten::slice_backward" || node->num_operands() != 1) return std::nullopt;
  const std::vector<Argument>& args = node->args();
  if (args.size() != 6) return std::nullopt;
  for (int i = 1; i < 6; ++i) {
    AttrKind kind = args[i].value.kind();
    if (i == 1 ? kind != AttrKind::kIntList : kind != AttrKind::kInt) return std::nullopt;
  }
  if (args[5].value.as_int() != 1) return std::nullopt;
  SliceFill fill;
  fill.grad = node->operand(0);
  fill.sizes = args[1].value.as_int_list();
  const int64_t rank = static_cast<int64_t>(fill.sizes.size());
  fill.dim = args[2].value.as_int();
  if (fill.dim < 0) fill.dim += rank;
  if (fill.dim < 0 || fill.dim >= rank) return std::nullopt;
  const int64_t n = fill.sizes[fill.dim];
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  fill.start = clamp(args[3].value.as_int());
  fill.end = clamp(args[4].value.as_int());
  if (!fill.grad->type().is_tensor()) return std::nullopt;
  const std::vector<int64_t>& grad_sizes = fill.grad->type().tensor().sizes;
  if (static_cast<int64_t>(grad_sizes.size()) != rank || grad_sizes[fill.dim] != fill.end - fill.start) {
    return std::nullopt;
  }
  return fill;
}

bool AlphaIsOne(const Node& add) {
  const Attribute* alpha = add.FindArg("alpha");
  if (alpha == nullptr || alpha->is_none()) return true;
  if (alpha->kind() == AttrKind::kInt) return alpha->as_int() == 1;
  if (alpha->kind() == AttrKind::kFloat) return alpha->as_float() == 1.0;
  return false;
}

bool OnlyReadBy(const Value* value, const Node* reader) {
  for (const Use& use : value->uses()) {
    if (use.user != reader) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> SliceGradsToCat::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    absl::flat_hash_set<const Value*> outputs;
    for (const GraphOutput& output : graph->outputs()) outputs.insert(output.value);
    for (Node* add : graph->nodes()) {
      if (add->op() != "aten::add.Tensor" || add->num_operands() != 2 || add->num_results() != 1) continue;
      if (add->operand(0) == add->operand(1) || !AlphaIsOne(*add)) continue;
      std::optional<SliceFill> x = AsSliceFill(add->operand(0));
      std::optional<SliceFill> y = AsSliceFill(add->operand(1));
      if (!x || !y || x->sizes != y->sizes || x->dim != y->dim) continue;
      if (x->start > y->start) std::swap(x, y);
      const int64_t n = x->sizes[x->dim];
      if (x->start != 0 || x->end != y->start || y->end != n) continue;  // the halves must tile the dim
      const Type& result_type = add->result(0)->type();
      const TensorType& lo = x->grad->type().tensor();
      const TensorType& hi = y->grad->type().tensor();
      if (!result_type.is_tensor() || lo.dtype != hi.dtype || lo.device != hi.device) continue;
      TensorType cat_type = result_type.tensor();
      if (cat_type.dtype != lo.dtype || cat_type.device != lo.device || cat_type.sizes != x->sizes ||
          !cat_type.IsContiguous()) {
        continue;
      }
      Value* a = add->operand(0);
      Value* b = add->operand(1);
      if (outputs.contains(a) || outputs.contains(b) || !OnlyReadBy(a, add) || !OnlyReadBy(b, add)) continue;
      Node* cat = graph->AddNode("aten::cat", {NodeArg(std::vector<Value*>{x->grad, y->grad}), NodeArg(Attribute(x->dim))},
                                 {result_type}, add);
      cat->mutable_annotations() = add->annotations();
      graph->ReplaceAllUsesWith(add->result(0), cat->result(0));  // outputs too
      Node* fill_a = a->producer();
      Node* fill_b = b->producer();
      graph->EraseNode(add);
      graph->EraseNode(fill_a);
      graph->EraseNode(fill_b);
      changed = true;
    }
  }
  return changed;
}

MAGI_REGISTER(Pass, "slice-grads-to-cat",
              [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
                if (!options.empty()) return absl::InvalidArgumentError("slice-grads-to-cat takes no options");
                return std::make_unique<SliceGradsToCat>();
              });

}  // namespace magi
