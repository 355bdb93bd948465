#include "magi/passes/concat_matmuls.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// One `aten::mm(A, aten::t(W))` with W a parameter, gathered or not.
struct Part {
  Node* mm = nullptr;
  Node* t = nullptr;
  Value* param = nullptr;  // the role=param input: P, or P.shard read by the gather
  Node* start = nullptr;   // the all-gather's start; null when W is the parameter itself
  int gather_index = -1;   // W's index in the start's and the wait's lists
  Node* cast = nullptr;    // aten::_to_copy of P.shard that the start gathers (mixed precision), or null
};

// The constant arguments of `node`, as text (equal for casts to the same dtype and layout).
std::string ConstantArgs(const Node& node) {
  std::string text;
  for (const Argument& arg : node.args()) {
    if (!arg.value.is_operand_ref()) absl::StrAppend(&text, ",", arg.name, "=", arg.value.ToString());
  }
  return text;
}

bool OnlyUse(const Value* value, const Node* user) {
  return value->uses().size() == 1 && value->uses()[0].user == user;
}

bool IsOutput(const Graph& graph, const Value* value) {
  for (const GraphOutput& output : graph.outputs()) {
    if (output.value == value) return true;
  }
  return false;
}

bool IsStaticMatrix(const Value* value) {
  return value->type().is_tensor() && value->type().tensor().rank() == 2 && !value->type().tensor().HasDynamicDims();
}

// A key equal for values that are the same tensor: the value itself, or view ops with the
// same constant arguments applied to values with equal keys.
std::string ActivationKey(const Value* value) {
  const Node* node = value->producer();
  if (node == nullptr || node->num_operands() != 1 || !IsViewOp(node->op()) || node->num_results() != 1) {
    return absl::StrCat("%", reinterpret_cast<uintptr_t>(value));
  }
  std::string key = absl::StrCat(node->op(), "(", ActivationKey(node->operand(0)));
  for (const Argument& arg : node->args()) {
    absl::StrAppend(&key, ",", arg.name, "=", arg.value.is_operand_ref() ? "$" : arg.value.ToString());
  }
  return absl::StrCat(key, "):", value->type().ToString());
}

std::optional<Part> AsPart(const Graph& graph, Node* mm) {
  if (mm->op() != "aten::mm" || mm->num_operands() != 2 || mm->num_results() != 1) return std::nullopt;
  if (!IsStaticMatrix(mm->operand(0)) || !IsStaticMatrix(mm->result(0))) return std::nullopt;
  if (mm->operand(0) == mm->operand(1)) return std::nullopt;
  Part part;
  part.mm = mm;
  part.t = mm->operand(1)->producer();
  if (part.t == nullptr || part.t->op() != "aten::t" || part.t->num_operands() != 1) return std::nullopt;
  if (!OnlyUse(part.t->result(0), mm) || IsOutput(graph, part.t->result(0))) return std::nullopt;
  Value* weight = part.t->operand(0);
  if (!IsStaticMatrix(weight) || !weight->type().tensor().IsContiguous()) return std::nullopt;
  if (weight->is_graph_input()) {
    if (weight->role() != InputRole::kParam) return std::nullopt;
    part.param = weight;
    return part;
  }
  Node* wait = weight->producer();
  if (wait->op() != kWaitOp || !OnlyUse(weight, part.t) || IsOutput(graph, weight)) return std::nullopt;
  Node* start = StartOfWait(*wait);
  if (start == nullptr || start->op() != kAllGatherStartOp || start->num_operands() != wait->num_results()) {
    return std::nullopt;
  }
  part.start = start;
  part.gather_index = weight->result_index();
  Value* shard = start->operand(part.gather_index);
  if (Node* cast = shard->producer(); cast != nullptr) {
    // Mixed precision: the shard cast to the compute dtype before the gather.
    if (cast->op() != "aten::_to_copy" || cast->num_operands() != 1 || !OnlyUse(shard, start) ||
        IsOutput(graph, shard) || !IsStaticMatrix(shard) || !shard->type().tensor().IsContiguous()) {
      return std::nullopt;
    }
    part.cast = cast;
    shard = cast->operand(0);
  }
  if (!shard->is_graph_input() || shard->role() != InputRole::kParam || !IsStaticMatrix(shard) ||
      !shard->type().tensor().IsContiguous()) {
    return std::nullopt;
  }
  part.param = shard;
  return part;
}

// The first group of two or more parts in program order, or empty.
std::vector<Part> FindGroup(const Graph& graph) {
  using Key = std::tuple<std::string, const Node*, int64_t, std::string>;
  std::map<Key, std::vector<Part>> groups;
  std::vector<Key> order;
  for (Node* node : graph.nodes()) {
    std::optional<Part> part = AsPart(graph, node);
    if (!part) continue;
    const TensorType& w = part->param->type().tensor();
    Key key{ActivationKey(node->operand(0)), part->start, w.sizes[1],
            absl::StrCat(DTypeName(w.dtype), "@", w.device.ToString(), "->",
                         DTypeName(node->result(0)->type().tensor().dtype), " cast ",
                         part->cast == nullptr ? "-" : ConstantArgs(*part->cast))};
    std::vector<Part>& group = groups[key];
    bool repeated = false;
    for (const Part& other : group) repeated |= other.param == part->param;
    if (repeated) continue;
    if (group.empty()) order.push_back(key);
    group.push_back(*part);
  }
  for (const Key& key : order) {
    if (groups[key].size() >= 2) return groups[key];
  }
  return {};
}

// The longest dot-separated prefix the paths share ("layers.0.attention" of its wq and wk).
std::string CommonModulePath(const std::vector<Part>& parts) {
  std::string common = parts[0].mm->annotations().module_path;
  for (const Part& part : parts) {
    const std::string& path = part.mm->annotations().module_path;
    size_t n = 0;
    while (n < common.size() && n < path.size() && common[n] == path[n]) ++n;
    if (n < common.size() || n < path.size()) {
      const bool at_boundary = (n == common.size() || common[n] == '.') && (n == path.size() || path[n] == '.');
      if (!at_boundary) {
        while (n > 0 && common[n - 1] != '.') --n;
        if (n > 0) --n;  // drop the dot
      }
      common.resize(n);
    }
  }
  return common;
}

TensorType WithSizes(const TensorType& like, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  TensorType type = like;
  type.sizes = std::move(sizes);
  type.strides = std::move(strides);
  return type;
}

// Erases `value`'s producer while it is an unread view op, then its operand's likewise.
void EraseUnreadViews(Graph& graph, Value* value) {
  while (value != nullptr && !value->has_uses() && !IsOutput(graph, value)) {
    Node* node = value->producer();
    if (node == nullptr || node->num_results() != 1 || node->num_operands() != 1 || !IsViewOp(node->op())) return;
    Value* operand = node->operand(0);
    graph.EraseNode(node);
    value = operand;
  }
}

absl::Status Rewrite(Graph& graph, const std::vector<Part>& parts) {
  Node* first_mm = parts[0].mm;
  Node* start = parts[0].start;
  const TensorType& weight0 = parts[0].param->type().tensor();
  const int64_t columns = weight0.sizes[1];
  std::vector<Value*> shards;
  std::vector<int64_t> rows;  // per rank
  int64_t total = 0;
  for (const Part& part : parts) {
    shards.push_back(part.param);
    rows.push_back(part.param->type().tensor().sizes[0]);
    total += rows.back();
  }
  int64_t world = 1;
  if (start != nullptr) {
    const ProcessGroup* group = nullptr;
    if (const Attribute* name = start->FindArg("group"); name != nullptr && name->kind() == AttrKind::kString) {
      group = graph.module() == nullptr ? nullptr : graph.module()->FindProcessGroup(name->as_string());
    }
    if (group == nullptr) return absl::FailedPreconditionError(absl::StrCat(start->DebugName(), ": unknown group"));
    world = group->size;
  }
  NodeAnnotations weight_annotations;
  weight_annotations.phase = first_mm->annotations().phase;
  weight_annotations.module_path = CommonModulePath(parts);
  // The concatenation, before the gather (or the first matmul) that reads it.
  Node* cat_before = start != nullptr ? start : first_mm;
  auto name = [&graph](const std::string& wanted) {
    return graph.FindValue(wanted) == nullptr ? wanted : graph.FreshName(wanted + ".");
  };
  const std::string concat_name = absl::StrCat(parts[0].param->name(), ".concat");
  Node* cast0 = parts[0].cast;
  Node* cat = graph.AddNode(
      "aten::cat", {NodeArg(shards), NodeArg(Attribute(int64_t{0}))}, {Type::Tensor(WithSizes(weight0, {total, columns}))},
      cat_before, {name(cast0 == nullptr ? concat_name : absl::StrCat(concat_name, ".", DTypeName(weight0.dtype)))});
  cat->mutable_annotations() = weight_annotations;
  Value* weight = cat->result(0);
  if (cast0 != nullptr) {
    // One cast of the concatenation, with the parts' arguments.
    std::vector<NodeArg> args;
    for (const Argument& arg : cast0->args()) {
      if (arg.value.is_operand_ref()) {
        args.emplace_back(weight, arg.name);
      } else {
        args.emplace_back(arg.value, arg.name);
      }
    }
    Node* cast = graph.AddNode("aten::_to_copy", std::move(args),
                               {Type::Tensor(WithSizes(cast0->result(0)->type().tensor(), {total, columns}))},
                               cat_before, {name(concat_name)});
    cast->mutable_annotations() = weight_annotations;
    weight = cast->result(0);
  }
  if (start != nullptr) {
    Node* wait = WaitOfStart(*start);
    absl::flat_hash_set<int> replaced;
    for (const Part& part : parts) replaced.insert(part.gather_index);
    std::vector<Value*> inputs;
    std::vector<int> new_index(start->num_operands(), -1);
    int cat_index = -1;
    for (int i = 0; i < start->num_operands(); ++i) {
      if (!replaced.contains(i)) {
        new_index[i] = static_cast<int>(inputs.size());
        inputs.push_back(start->operand(i));
      } else if (cat_index < 0) {
        cat_index = static_cast<int>(inputs.size());
        inputs.push_back(weight);
      }
    }
    const ProcessGroup* group = graph.module()->FindProcessGroup(start->FindArg("group")->as_string());
    absl::StatusOr<Node*> gather = AddCollectiveStart(graph, CollectiveKind::kAllGather, inputs, *group, "sum", start);
    if (!gather.ok()) return gather.status();
    Node* gathered = AddWait(graph, *gather, wait);
    (*gather)->mutable_annotations() = start->annotations();
    gathered->mutable_annotations() = wait->annotations();
    for (int i = 0; i < wait->num_results(); ++i) {
      if (new_index[i] >= 0) graph.ReplaceAllUsesWith(wait->result(i), gathered->result(new_index[i]));
    }
    weight = gathered->result(cat_index);
  }
  // One matmul, where the first part's was.
  const TensorType& result0 = first_mm->result(0)->type().tensor();
  const int64_t m = result0.sizes[0];
  const int64_t width = world * total;
  Node* t = graph.AddNode("aten::t", {NodeArg(weight)}, {Type::Tensor(WithSizes(weight0, {columns, width}, {1, columns}))},
                          first_mm);
  Node* mm = graph.AddNode("aten::mm", {NodeArg(first_mm->operand(0)), NodeArg(t->result(0))},
                           {Type::Tensor(WithSizes(result0, {m, width}))}, first_mm);
  t->mutable_annotations() = weight_annotations;
  mm->mutable_annotations() = weight_annotations;
  Value* y = mm->result(0);
  if (world > 1) {
    Node* view = graph.AddNode("aten::view", {NodeArg(y), NodeArg(Attribute(std::vector<int64_t>{m, world, total}))},
                               {Type::Tensor(WithSizes(result0, {m, world, total}))}, first_mm);
    view->mutable_annotations() = weight_annotations;
    y = view->result(0);
  }
  // Each part's columns, as the contiguous tensor its matmul gave.
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    Node* part_mm = parts[i].mm;
    const NodeAnnotations& annotations = part_mm->annotations();
    const TensorType& result = part_mm->result(0)->type().tensor();
    const int64_t dim = world > 1 ? 2 : 1;
    std::vector<int64_t> sizes = world > 1 ? std::vector<int64_t>{m, world, rows[i]} : std::vector<int64_t>{m, rows[i]};
    std::vector<int64_t> strides =
        world > 1 ? std::vector<int64_t>{world * total, total, 1} : std::vector<int64_t>{total, 1};
    Node* slice = graph.AddNode("aten::slice.Tensor",
                                {NodeArg(y), NodeArg(Attribute(dim)), NodeArg(Attribute(offset)),
                                 NodeArg(Attribute(offset + rows[i])), NodeArg(Attribute(int64_t{1}))},
                                {Type::Tensor(WithSizes(result, sizes, strides))}, first_mm);
    Node* copy = graph.AddNode("aten::clone", {NodeArg(slice->result(0)), NodeArg(Attribute(int64_t{0}), "memory_format")},
                               {Type::Tensor(WithSizes(result, sizes))}, first_mm);
    Node* last = copy;
    if (world > 1) {
      last = graph.AddNode("aten::view", {NodeArg(copy->result(0)), NodeArg(Attribute(result.sizes))},
                           {Type::Tensor(WithSizes(result, result.sizes))}, first_mm);
    }
    for (Node* node : {slice, copy, last}) node->mutable_annotations() = annotations;
    graph.ReplaceAllUsesWith(part_mm->result(0), last->result(0));
    offset += rows[i];
  }
  for (const Part& part : parts) {
    Value* activation = part.mm->operand(0);
    graph.EraseNode(part.mm);
    graph.EraseNode(part.t);
    EraseUnreadViews(graph, activation);
  }
  if (start != nullptr) {
    graph.EraseNode(WaitOfStart(*start));
    graph.EraseNode(start);
  }
  for (const Part& part : parts) {
    if (part.cast != nullptr) graph.EraseNode(part.cast);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> ConcatMatmuls::RunOnGraph(Graph& graph) {
  bool changed = false;
  // One group at a time: a rewrite replaces the all-gather the next group may read.
  for (std::vector<Part> group = FindGroup(graph); !group.empty(); group = FindGroup(graph)) {
    if (absl::Status status = Rewrite(graph, group); !status.ok()) return status;
    changed = true;
  }
  return changed;
}

MAGI_REGISTER_PASS(ConcatMatmuls);

}  // namespace magi
