#include "magi/ir/magi_ops.h"

#include "absl/strings/str_cat.h"

namespace magi {

absl::StatusOr<Node*> AddCall(Graph& graph, const Graph& callee, const std::vector<Value*>& inputs, Node* before,
                              std::vector<std::string> result_names) {
  if (inputs.size() != callee.inputs().size()) {
    return absl::InvalidArgumentError(absl::StrCat("graph @", callee.name(), " takes ", callee.inputs().size(),
                                                   " inputs, ", inputs.size(), " given"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!(inputs[i]->type() == callee.inputs()[i]->type())) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " of @", callee.name(), " is ",
                                                     callee.inputs()[i]->type().ToString(), "; %", inputs[i]->name(),
                                                     " is ", inputs[i]->type().ToString()));
    }
  }
  std::vector<Type> types;
  for (const GraphOutput& output : callee.outputs()) types.push_back(output.value->type());
  return graph.AddNode(std::string(kCallOp), {NodeArg(inputs), NodeArg(Attribute(callee.name()), "callee")},
                       std::move(types), before, std::move(result_names));
}

std::string CalleeName(const Node& call) {
  const Attribute* callee = call.FindArg("callee");
  return callee != nullptr && callee->kind() == AttrKind::kString ? callee->as_string() : std::string();
}

absl::StatusOr<Node*> AddAdamW(Graph& graph, Value* param, Value* grad, Value* exp_avg, Value* exp_avg_sq,
                               Value* decay, Value* step_size, Value* bc2_sqrt, const AdamWConstants& constants,
                               const std::string& name, Node* before) {
  for (Value* value : {param, grad, exp_avg, exp_avg_sq, decay, step_size, bc2_sqrt}) {
    if (!value->type().is_tensor()) return absl::InvalidArgumentError(absl::StrCat("%", value->name(), " is not a tensor"));
  }
  const Type& type = param->type();
  for (Value* value : {grad, exp_avg, exp_avg_sq}) {
    if (!(value->type() == type)) {
      return absl::InvalidArgumentError(absl::StrCat("magi::adamw of %", param->name(), " (", type.ToString(),
                                                     "): %", value->name(), " is ", value->type().ToString()));
    }
  }
  std::vector<NodeArg> args = {NodeArg(param),
                               NodeArg(grad),
                               NodeArg(exp_avg),
                               NodeArg(exp_avg_sq),
                               NodeArg(decay),
                               NodeArg(step_size),
                               NodeArg(bc2_sqrt),
                               NodeArg(Attribute(constants.beta1), "beta1"),
                               NodeArg(Attribute(constants.beta2), "beta2"),
                               NodeArg(Attribute(constants.eps), "eps")};
  Type result = type;
  if (result.is_tensor()) {
    TensorType tensor = result.tensor();
    tensor.strides.clear();  // results are fresh, contiguous tensors
    result = Type::Tensor(std::move(tensor));
  }
  return graph.AddNode(std::string(kAdamWOp), std::move(args), {result, result, result}, before,
                       {graph.FreshName(name + ".next."), graph.FreshName(name + ".exp_avg.next."),
                        graph.FreshName(name + ".exp_avg_sq.next.")});
}

absl::StatusOr<Node*> AddAdamWSplit(Graph& graph, Value* hi, Value* lo, const Node& adamw, const std::string& name,
                                    Node* before) {
  if (adamw.op() != kAdamWOp || adamw.num_operands() != 7 || adamw.num_results() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("magi::adamw_split of %", name, ": not from a magi::adamw"));
  }
  const Type& param = adamw.operand(kAdamWParam)->type();
  if (!param.is_tensor() || !hi->type().is_tensor() || !lo->type().is_tensor() ||
      param.tensor().dtype != DType::kFloat32 || hi->type().tensor().dtype != DType::kBFloat16 ||
      lo->type().tensor().dtype != DType::kInt16 || hi->type().tensor().sizes != param.tensor().sizes ||
      lo->type().tensor().sizes != param.tensor().sizes) {
    return absl::InvalidArgumentError(absl::StrCat("magi::adamw_split of %", name, ": halves ",
                                                   hi->type().ToString(), " and ", lo->type().ToString(),
                                                   " for a parameter ", param.ToString(),
                                                   " (expected bf16 and i16 of an f32's sizes)"));
  }
  const AdamWConstants constants = AdamWConstantsOf(adamw);
  std::vector<NodeArg> args = {NodeArg(hi),
                               NodeArg(lo),
                               NodeArg(adamw.operand(kAdamWGrad)),
                               NodeArg(adamw.operand(kAdamWExpAvg)),
                               NodeArg(adamw.operand(kAdamWExpAvgSq)),
                               NodeArg(adamw.operand(kAdamWDecay)),
                               NodeArg(adamw.operand(kAdamWStepSize)),
                               NodeArg(adamw.operand(kAdamWBc2Sqrt)),
                               NodeArg(Attribute(constants.beta1), "beta1"),
                               NodeArg(Attribute(constants.beta2), "beta2"),
                               NodeArg(Attribute(constants.eps), "eps")};
  auto fresh = [](const Type& type) {  // results are fresh, contiguous tensors
    TensorType tensor = type.tensor();
    tensor.strides.clear();
    return Type::Tensor(std::move(tensor));
  };
  return graph.AddNode(std::string(kAdamWSplitOp), std::move(args),
                       {fresh(hi->type()), fresh(lo->type()), adamw.result(1)->type(), adamw.result(2)->type()},
                       before,
                       {graph.FreshName(name + ".hi.next."), graph.FreshName(name + ".lo.next."),
                        graph.FreshName(name + ".exp_avg.next."), graph.FreshName(name + ".exp_avg_sq.next.")});
}

AdamWConstants AdamWConstantsOf(const Node& adamw) {
  AdamWConstants constants;
  auto read = [&](absl::string_view name, double& out) {
    const Attribute* attr = adamw.FindArg(name);
    if (attr == nullptr) return;
    if (attr->kind() == AttrKind::kFloat) out = attr->as_float();
    if (attr->kind() == AttrKind::kInt) out = static_cast<double>(attr->as_int());
  };
  read("beta1", constants.beta1);
  read("beta2", constants.beta2);
  read("eps", constants.eps);
  return constants;
}

absl::StatusOr<TensorType> LocalShardType(const TensorType& whole, int64_t group_size) {
  if (group_size < 1) return absl::InvalidArgumentError(absl::StrCat("a group of ", group_size, " ranks"));
  if (whole.sizes.empty() || whole.sizes[0] == kDynamicDim || whole.sizes[0] % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(whole.ToString(), " has no static dim 0 divisible by ", group_size));
  }
  TensorType piece = whole;
  piece.sizes[0] /= group_size;
  piece.strides.clear();  // a fresh, contiguous tensor
  return piece;
}

absl::StatusOr<Node*> AddLocalShard(Graph& graph, Value* whole, const ProcessGroup& group, const std::string& name,
                                    Node* before) {
  if (!whole->type().is_tensor()) return absl::InvalidArgumentError(absl::StrCat("%", whole->name(), " is not a tensor"));
  absl::StatusOr<TensorType> piece = LocalShardType(whole->type().tensor(), group.size);
  if (!piece.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("magi::local_shard of %", whole->name(), " over @", group.name, ": ",
                                                   piece.status().message()));
  }
  return graph.AddNode(std::string(kLocalShardOp), {NodeArg(whole), NodeArg(Attribute(group.name), "group")},
                       {Type::Tensor(*std::move(piece))}, before, {graph.FreshName(name)});
}

}  // namespace magi
