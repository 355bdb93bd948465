#include "magi/passes/slice_grads_to_cat.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "magi/passes/pass_registration.h"

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

// LibTorch's test for strides "like channels last" (c10/core/MemoryFormat.h,
// is_channels_last_strides_2d_s4 / _3d_s5): the dims from the channel dim (1) outward,
// then the batch dim, have increasing strides. Only rank 4 and 5 tensors can be so.
bool StridesLikeChannelsLast(const TensorType& type) {
  const size_t rank = type.sizes.size();
  if (rank != 4 && rank != 5) return false;
  const std::vector<int64_t> strides = type.strides.empty() ? ContiguousStrides(type.sizes) : type.strides;
  const std::vector<size_t> order = rank == 4 ? std::vector<size_t>{1, 3, 2, 0} : std::vector<size_t>{1, 4, 3, 2, 0};
  if (strides[1] == 0) return false;
  int64_t min = 0;
  for (size_t d : order) {
    if (type.sizes[d] == 0 || strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;  // N111 and the like: LibTorch defaults to contiguous
    min = strides[d];
    if (type.sizes[d] > 1) min *= type.sizes[d];
  }
  return true;
}

// The strides LibTorch gives a channels-last tensor of `sizes` (rank 4 or 5): the channel
// dim innermost, then the spatial dims from the last, then the batch.
std::vector<int64_t> ChannelsLastStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  std::vector<size_t> order = {1};
  for (size_t d = sizes.size() - 1; d >= 2; --d) order.push_back(d);
  order.push_back(0);
  for (size_t d : order) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

bool OnlyReadBy(const Value* value, const Node* reader) {
  for (const Use& use : value->uses()) {
    if (use.user != reader) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> SliceGradsToCat::RunOnGraph(Graph& graph) {
  bool changed = false;
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph.outputs()) outputs.insert(output.value);
  for (Node* add : graph.nodes()) {
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
    // aten::cat lays its result out as its inputs suggest: channels last when every
    // input's strides are like channels last (a rank-4 gradient of a transposed view
    // can be), contiguous otherwise. The add's result, and what reads it (views with
    // explicit strides such as _reshape_alias), are contiguous: then a clone to
    // contiguous follows the cat (a fusing backend writes the cat so at once).
    const bool channels_last = StridesLikeChannelsLast(lo) && StridesLikeChannelsLast(hi);
    TensorType cat_layout = cat_type;
    if (channels_last) cat_layout.strides = ChannelsLastStrides(cat_type.sizes);
    Node* cat = graph.AddNode("aten::cat", {NodeArg(std::vector<Value*>{x->grad, y->grad}), NodeArg(Attribute(x->dim))},
                              {Type::Tensor(cat_layout)}, add);
    cat->mutable_annotations() = add->annotations();
    Node* result = cat;
    if (channels_last) {
      result = graph.AddNode("aten::clone", {NodeArg(cat->result(0)), NodeArg(Attribute(int64_t{0}), "memory_format")},
                             {result_type}, add);
      result->mutable_annotations() = add->annotations();
    }
    graph.ReplaceAllUsesWith(add->result(0), result->result(0));  // outputs too
    Node* fill_a = a->producer();
    Node* fill_b = b->producer();
    graph.EraseNode(add);
    graph.EraseNode(fill_a);
    graph.EraseNode(fill_b);
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(SliceGradsToCat);

}  // namespace magi
