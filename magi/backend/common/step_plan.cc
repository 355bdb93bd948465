#include "magi/backend/common/step_plan.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/analysis/liveness.h"
#include "magi/analysis/op_traits.h"
#include "magi/backend/common/split_tensor.h"
#include "magi/base/status_macros.h"
#include "magi/compat/deterministic.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"

namespace magi {
namespace {

// The IValue for a constant attribute passed as an argument of `type`.
absl::StatusOr<c10::IValue> ConstantIValue(const Attribute& value, const compat::ArgType& type) {
  // An undefined tensor passed where the schema wants a (non-optional) Tensor.
  if (value.is_none() && type.kind == compat::ArgKind::kTensor && !type.optional) return c10::IValue(at::Tensor());
  if (value.is_none()) return c10::IValue();
  switch (value.kind()) {
    case AttrKind::kBool:
      return c10::IValue(value.as_bool());
    case AttrKind::kInt:
      if (type.kind == compat::ArgKind::kFloat) return c10::IValue(static_cast<double>(value.as_int()));
      return c10::IValue(value.as_int());
    case AttrKind::kFloat:
      return c10::IValue(value.as_float());
    case AttrKind::kString:
      return c10::IValue(value.as_string());
    case AttrKind::kIntList:
      if (type.kind == compat::ArgKind::kFloatList) {
        std::vector<double> floats(value.as_int_list().begin(), value.as_int_list().end());
        return c10::IValue(floats);
      }
      if (type.kind == compat::ArgKind::kTensorList || type.kind == compat::ArgKind::kOptionalTensorList) {
        if (!value.as_int_list().empty()) break;
        if (type.kind == compat::ArgKind::kTensorList) return c10::IValue(std::vector<at::Tensor>());
        return c10::IValue(c10::List<c10::optional<at::Tensor>>());
      }
      if (type.kind == compat::ArgKind::kBoolList && value.as_int_list().empty()) {
        return c10::IValue(c10::List<bool>());
      }
      return c10::IValue(value.as_int_list());
    case AttrKind::kFloatList:
      return c10::IValue(value.as_float_list());
    case AttrKind::kBoolList: {
      c10::List<bool> list;
      for (bool b : value.as_bool_list()) list.push_back(b);
      return c10::IValue(list);
    }
    case AttrKind::kDType: {
      MAGI_ASSIGN_OR_RETURN(c10::ScalarType scalar_type, compat::ToScalarType(value.as_dtype()));
      return c10::IValue(scalar_type);
    }
    case AttrKind::kDevice:
      return c10::IValue(compat::ToTorchDevice(value.as_device()));
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a ", AttrKindName(value.kind()), " cannot be passed as ", "an argument of this type"));
}

absl::Status PlanOpArguments(const Node& node, const c10::FunctionSchema& schema,
                             const std::function<int(const Value*)>& slot, NodePlan& plan) {
  const std::vector<Argument>& args = node.args();
  if (args.size() > schema.arguments().size()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(node), ": ", args.size(), " arguments, but ", node.op(),
                                                   " takes ", schema.arguments().size()));
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    compat::ArgType type = compat::ClassifyArgument(argument);
    ArgPlan arg;
    if (i >= args.size()) {
      // Trailing arguments the IR left out take the schema's defaults.
      if (!argument.default_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(node), ": argument '", argument.name(), "' is missing and has no default"));
      }
      arg.constant = *argument.default_value();
    } else if (args[i].value.kind() == AttrKind::kOperand) {
      arg.source = ArgPlan::Source::kOperand;
      arg.slots.push_back(slot(node.operand(args[i].value.as_operand().index)));
    } else if (args[i].value.kind() == AttrKind::kOperandList) {
      arg.source = type.kind == compat::ArgKind::kOptionalTensorList ? ArgPlan::Source::kOptionalOperandList
                                                                     : ArgPlan::Source::kOperandList;
      for (int index : args[i].value.as_operand_list().indices) {
        if (index == OperandListRef::kNoOperand) {
          if (arg.source != ArgPlan::Source::kOptionalOperandList) {
            return absl::InvalidArgumentError(
                absl::StrCat(Where(node), ": argument '", argument.name(), "' cannot hold none"));
          }
          arg.slots.push_back(-1);
        } else {
          arg.slots.push_back(slot(node.operand(index)));
        }
      }
    } else {
      absl::StatusOr<c10::IValue> constant = ConstantIValue(args[i].value, type);
      if (!constant.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(node), ": argument '", argument.name(), "': ", constant.status().message()));
      }
      arg.constant = *std::move(constant);
    }
    plan.args.push_back(std::move(arg));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Where(const Node& node) { return absl::StrCat("graph @", node.graph()->name(), ": ", node.DebugName()); }

absl::StatusOr<c10::OperatorHandle> FindOperator(const Node& node) {
  std::vector<std::string> parts = absl::StrSplit(node.op(), absl::MaxSplits('.', 1));
  std::string overload = parts.size() > 1 ? parts[1] : "";
  c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({parts[0], overload});
  if (!op) return absl::NotFoundError(absl::StrCat(Where(node), ": LibTorch has no operator ", node.op()));
  return *op;
}

// The in-place variant of `node`'s op ("aten::scatter_.src" of "aten::scatter.src"); it
// must take the same arguments, since the node's argument plan is pushed for it.
static absl::StatusOr<c10::OperatorHandle> InPlaceVariant(const Node& node, const c10::OperatorHandle& functional) {
  const c10::OperatorName& name = functional.schema().operator_name();
  c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name.name + "_", name.overload_name});
  if (!op) return absl::InternalError(absl::StrCat(Where(node), ": LibTorch has no in-place ", name.name, "_"));
  const auto& a = functional.schema().arguments();
  const auto& b = op->schema().arguments();
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = a[i].name() == b[i].name();
  if (!same) {
    return absl::InternalError(absl::StrCat(Where(node), ": ", name.name, "_ takes other arguments than ", name.name));
  }
  return *op;
}

std::string WhyNotRunnable(const Node& node) {
  if (IsCommunication(node.op()) || node.op() == kCallOp || IsAdamW(node) || node.op() == kLocalShardOp) {
    return "";
  }
  if (node.op_namespace() == "magi") return "no LibTorch executor for this magi:: op";
  if (!FindOperator(node).ok()) return "LibTorch has no such operator";
  return "";
}

absl::StatusOr<StepPlan> BuildStepPlan(const Graph& graph) {
  StepPlan step;
  absl::flat_hash_map<const Value*, int> slot_of;
  std::function<int(const Value*)> slot = [&](const Value* v) {
    auto [it, inserted] = slot_of.emplace(v, static_cast<int>(slot_of.size()));
    return it->second;
  };
  for (const Value* input : graph.inputs()) {
    int s = slot(input);
    step.input_slots.push_back(s);
    if (input->role() == InputRole::kRng) step.rng_slot = s;
  }
  absl::flat_hash_map<const Node*, int> plan_of_start;
  // Donation: which results (magi::adamw's, aten::scatter.src's) are written over their
  // inputs (liveness.h); computed once, for graphs that have such an op.
  absl::flat_hash_map<const Value*, const Value*> in_place;
  bool in_place_known = false;
  auto plan_in_place = [&] {
    if (in_place_known) return;
    absl::StatusOr<Liveness> liveness = ComputeLiveness(graph);
    if (liveness.ok()) in_place = std::move(liveness->in_place);
    in_place_known = true;
  };
  absl::flat_hash_set<std::string> groups, callees;
  for (const Node* node : graph.nodes()) {
    NodePlan plan(node);
    if (node->op() == kWaitOp) {
      plan.kind = NodePlan::Kind::kWait;
      const Node* start = StartOfWait(*node);
      auto it = start == nullptr ? plan_of_start.end() : plan_of_start.find(start);
      if (it == plan_of_start.end()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": waits on no earlier collective start"));
      }
      plan.start_plan = it->second;
    } else if (std::optional<CollectiveKind> kind = GetCollectiveKind(node->op())) {
      plan.kind = NodePlan::Kind::kCollectiveStart;
      plan.collective = *kind;
      const Attribute* group = node->FindArg("group");
      const Attribute* reduce_op = node->FindArg("reduce_op");
      if (group == nullptr || group->kind() != AttrKind::kString) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": no group"));
      }
      plan.group = group->as_string();
      if (groups.insert(plan.group).second) step.groups.push_back(plan.group);
      plan.reduce_op = reduce_op != nullptr && reduce_op->kind() == AttrKind::kString ? reduce_op->as_string() : "sum";
      plan_of_start[node] = static_cast<int>(step.nodes.size());
    } else if (node->op() == kCallOp) {
      plan.kind = NodePlan::Kind::kCall;
      plan.callee = CalleeName(*node);
      if (plan.callee.empty()) return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": no callee"));
      if (callees.insert(plan.callee).second) step.callees.push_back(plan.callee);
    } else if (IsAdamW(*node)) {
      plan.adamw_split = IsAdamWSplit(*node);
      const int results = plan.adamw_split ? 4 : 3;
      if (node->num_operands() != results + 4 || node->num_results() != results) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": malformed ", node->op()));
      }
      plan.kind = NodePlan::Kind::kAdamW;
      plan.adamw = AdamWConstantsOf(*node);
      plan_in_place();
      for (int r = 0; r < results; ++r) plan.adamw_in_place[r] = in_place.contains(node->result(r));
    } else if (node->op() == kLocalShardOp) {
      const Attribute* group = node->FindArg("group");
      if (node->num_operands() != 1 || node->num_results() != 1 || group == nullptr ||
          group->kind() != AttrKind::kString) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": malformed magi::local_shard"));
      }
      plan.kind = NodePlan::Kind::kLocalShard;
      plan.group = group->as_string();
      if (groups.insert(plan.group).second) step.groups.push_back(plan.group);
    } else if (node->op_namespace() == "magi") {
      return absl::UnimplementedError(absl::StrCat(Where(*node), ": no LibTorch executor for ", node->op()));
    }
    if (plan.kind == NodePlan::Kind::kOp) {
      MAGI_ASSIGN_OR_RETURN(c10::OperatorHandle op, FindOperator(*node));
      plan.op = op;
      plan.index_check = FindIndexCheck(node->op());
      plan.uninitialized = GetOpTraits(node->op()).uninitialized;
      plan.scatter_src = node->op() == "aten::scatter.src" || node->op() == "aten::scatter_.src";
      MAGI_RETURN_IF_ERROR(PlanOpArguments(*node, op.schema(), slot, plan));
      if (node->num_results() == 1 && InPlaceOperandOfResult(node->op(), 0) >= 0) {
        plan_in_place();
        if (in_place.contains(node->result(0))) {
          MAGI_ASSIGN_OR_RETURN(c10::OperatorHandle in_place_op, InPlaceVariant(*node, op));
          plan.in_place_op = in_place_op;
        }
      }
    } else if (plan.kind != NodePlan::Kind::kWait) {
      ArgPlan operands;
      operands.source = ArgPlan::Source::kOperandList;
      for (const Value* operand : node->operands()) operands.slots.push_back(slot(operand));
      plan.args.push_back(std::move(operands));
    }
    for (const Value* result : node->results()) {
      plan.result_slots.push_back(slot(result));
      plan.result_types.push_back(result->type().tensor());
    }
    step.nodes.push_back(std::move(plan));
  }
  for (const GraphOutput& output : graph.outputs()) step.output_slots.push_back(slot(output.value));
  step.num_slots = static_cast<int>(slot_of.size());
  step.slot_of = slot_of;

  // Free each value after its last use (never graph outputs; inputs belong to the caller
  // but the executor's reference is dropped too). A wait reads its start's futures.
  std::vector<int> last_use(step.num_slots, -1);
  for (size_t n = 0; n < step.nodes.size(); ++n) {
    for (const ArgPlan& arg : step.nodes[n].args) {
      for (int s : arg.slots) {
        if (s >= 0) last_use[s] = static_cast<int>(n);
      }
    }
  }
  std::vector<bool> is_output(step.num_slots, false);
  for (int s : step.output_slots) is_output[s] = true;
  for (int s = 0; s < step.num_slots; ++s) {
    if (last_use[s] >= 0 && !is_output[s]) step.nodes[last_use[s]].release_slots.push_back(s);
  }
  // Results nobody uses are dropped as soon as they are made.
  for (size_t n = 0; n < step.nodes.size(); ++n) {
    if (step.nodes[n].kind == NodePlan::Kind::kCollectiveStart) continue;  // futures: the wait takes them
    for (int s : step.nodes[n].result_slots) {
      if (last_use[s] < 0 && !is_output[s]) step.nodes[n].release_slots.push_back(s);
    }
  }
  return step;
}

at::Tensor LocalShardOf(const at::Tensor& whole, int rank, int size) {
  const int64_t rows = whole.size(0) / size;
  return whole.narrow(0, rank * rows, rows).clone(at::MemoryFormat::Contiguous);
}

void PushArguments(const NodePlan& plan, const std::vector<at::Tensor>& slots, torch::jit::Stack& stack) {
  for (const ArgPlan& arg : plan.args) {
    switch (arg.source) {
      case ArgPlan::Source::kConstant:
        stack.push_back(arg.constant);
        break;
      case ArgPlan::Source::kOperand:
        stack.emplace_back(slots[arg.slots[0]]);
        break;
      case ArgPlan::Source::kOperandList: {
        std::vector<at::Tensor> list;
        list.reserve(arg.slots.size());
        for (int s : arg.slots) list.push_back(slots[s]);
        stack.emplace_back(std::move(list));
        break;
      }
      case ArgPlan::Source::kOptionalOperandList: {
        c10::List<c10::optional<at::Tensor>> list;
        for (int s : arg.slots) list.push_back(s < 0 ? c10::optional<at::Tensor>() : slots[s]);
        stack.emplace_back(std::move(list));
        break;
      }
    }
  }
}

namespace {

// aten::scatter(_).src's arguments (self, dim, index, src) on `stack`: whether the index has
// size 1 along dim, so that no two source elements share a target (NodePlan::scatter_src).
bool OneIndexEntryAlongDim(const torch::jit::Stack& stack) {
  if (stack.size() != 4 || !stack[0].isTensor() || !stack[1].isInt() || !stack[2].isTensor()) return false;
  const at::Tensor& index = stack[2].toTensor();
  const int64_t rank = index.dim();
  int64_t dim = stack[1].toInt();
  if (dim < 0) dim += rank;
  // Out of range: not ours to diagnose; the op's own check reports it in the call below.
  return dim >= 0 && dim < rank && index.size(dim) == 1;
}

// A kernel may return an undefined tensor where its traced (meta) result is an empty one:
// aten::mkldnn_rnn_layer's workspace outside training (nn.LSTM), 0 bytes in the FX graph's
// type. When the IR counts every tensor the op returns, each undefined one whose IR type
// has no element becomes an empty tensor of that type; anything else is left as
// ResultTensors made it, for CheckResults to report.
std::vector<at::Tensor> WithEmptyForUndefined(const NodePlan& plan, const torch::jit::Stack& stack,
                                              std::vector<at::Tensor> defined) {
  std::vector<at::Tensor> all;
  for (const c10::IValue& value : stack) {
    if (value.isTensor()) {
      all.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) all.push_back(t);
    }
  }
  if (all.size() != plan.result_slots.size() || defined.empty()) return defined;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].defined()) continue;
    const TensorType& type = plan.result_types[i];
    absl::StatusOr<c10::ScalarType> dtype = compat::ToScalarType(type.dtype);
    if (!dtype.ok() || type.NumElements() != std::optional<int64_t>(0)) return defined;
    all[i] = at::empty(type.sizes, defined[0].options().dtype(*dtype));
  }
  return all;
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> CallOperator(const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                                     torch::jit::Stack& stack,
                                                     const std::function<void(torch::jit::Stack&)>& before_call,
                                                     bool in_place) {
  stack.clear();
  PushArguments(plan, slots, stack);
  if (before_call) before_call(stack);
  if (plan.index_check != nullptr) {
    absl::Status checked = RunIndexCheck(plan.index_check, plan.op->schema(), stack);
    if (!checked.ok()) return absl::Status(checked.code(), absl::StrCat(Where(*plan.node), ": ", checked.message()));
  }
  auto where = [&] { return Where(*plan.node); };  // made only for an error: this runs for every op of a step
  MAGI_RETURN_IF_ERROR(compat::CallTorchLazy(where, [&] {
    std::optional<compat::DeterministicAlgorithmsSuspended> suspended;  // for this call only
    if (plan.scatter_src && compat::DeterministicAlgorithmsOn() && OneIndexEntryAlongDim(stack)) suspended.emplace();
    (in_place && plan.in_place_op ? *plan.in_place_op : *plan.op).callBoxed(&stack);
  }));
  std::vector<at::Tensor> results = ResultTensors(stack);
  if (results.size() < plan.result_slots.size()) results = WithEmptyForUndefined(plan, stack, std::move(results));
  if (plan.uninitialized && compat::DeterministicAlgorithmsOn()) {
    MAGI_RETURN_IF_ERROR(compat::CallTorchLazy(where, [&] {
      for (at::Tensor& result : results) compat::FillUninitialized(result);
    }));
  }
  return results;
}

std::vector<at::Tensor> ResultTensors(torch::jit::Stack& stack) {
  std::vector<at::Tensor> tensors;
  for (c10::IValue& value : stack) {
    if (value.isTensor()) {
      if (value.toTensor().defined()) tensors.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) {
        if (t.defined()) tensors.push_back(t);
      }
    }
  }
  return tensors;
}

namespace {

// MAGI_CHECK_STRIDES=1: results must also have the IR's strides (sizes-1 dims aside). Off by
// default: a backend or LibTorch version may lay a result out otherwise and mean the same;
// on, it finds where a rewrite gave a value a layout that readers with explicit strides
// (_reshape_alias, as_strided) would misread.
bool CheckStrides() {
  static const bool on = [] {
    const char* value = std::getenv("MAGI_CHECK_STRIDES");
    return value != nullptr && value[0] != '\0' && std::string(value) != "0";
  }();
  return on;
}

}  // namespace

absl::Status CheckResults(const NodePlan& plan, const std::vector<at::Tensor>& tensors, bool allow_stride_check) {
  if (tensors.size() != plan.result_slots.size()) {
    return absl::InternalError(absl::StrCat(Where(*plan.node), ": produced ", tensors.size(),
                                            " tensors, the IR expects ", plan.result_slots.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorType& expected = plan.result_types[i];
    const at::Tensor& t = tensors[i];
    absl::StatusOr<c10::ScalarType> expected_scalar_type = compat::ToScalarType(expected.dtype);
    if (!expected_scalar_type.ok() || t.scalar_type() != *expected_scalar_type ||
        !std::equal(t.sizes().begin(), t.sizes().end(), expected.sizes.begin(), expected.sizes.end())) {
      absl::StatusOr<TensorType> actual = compat::TensorTypeOf(t);
      return absl::InternalError(absl::StrCat(Where(*plan.node), ": produced ",
                                              actual.ok() ? actual->ToString() : t.toString(), ", the IR says ",
                                              expected.ToString()));
    }
    if (allow_stride_check && CheckStrides() && t.numel() > 1) {
      const std::vector<int64_t> want = expected.strides.empty() ? ContiguousStrides(expected.sizes) : expected.strides;
      bool same = static_cast<size_t>(t.dim()) == want.size();
      for (int64_t d = 0; same && d < t.dim(); ++d) same = t.size(d) == 1 || t.stride(d) == want[d];
      if (!same) {
        absl::StatusOr<TensorType> actual = compat::TensorTypeOf(t);
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": produced ",
                                                actual.ok() ? actual->ToString() : t.toString(), ", the IR says ",
                                                expected.ToString(), " (MAGI_CHECK_STRIDES)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SetGeneratorState(const StepPlan& plan, const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  for (const NodePlan& node : plan.nodes) {
    if (!node.result_types.empty() && node.result_types[0].device.type == DeviceType::kCuda) {
      generator = at::globalContext().defaultGenerator(compat::ToTorchDevice(node.result_types[0].device));
      break;
    }
  }
  return compat::CallTorch(absl::StatusCode::kInvalidArgument, "rng.state", [&] {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  });
}

std::vector<at::Tensor> AdamWReference(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                                       const at::Tensor& exp_avg_sq, const at::Tensor& decay,
                                       const at::Tensor& step_size, const at::Tensor& bc2_sqrt,
                                       const AdamWConstants& c, const bool in_place[3]) {
  // LibTorch's AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
  // p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps); each step the op LibTorch's own AdamW runs.
  const bool p_in_place = in_place != nullptr && in_place[0];
  const bool m_in_place = in_place != nullptr && in_place[1];
  const bool v_in_place = in_place != nullptr && in_place[2];
  at::Tensor m = m_in_place ? exp_avg.mul_(c.beta1).add_(grad, 1.0 - c.beta1)
                            : at::add(at::mul(exp_avg, c.beta1), grad, 1.0 - c.beta1);
  at::Tensor v = v_in_place ? exp_avg_sq.mul_(c.beta2).addcmul_(grad, grad, 1.0 - c.beta2)
                            : at::addcmul(at::mul(exp_avg_sq, c.beta2), grad, grad, 1.0 - c.beta2);
  at::Tensor denom = at::add(at::div(at::sqrt(v), bc2_sqrt), c.eps, 1);
  at::Tensor update = at::mul(at::div(m, denom), step_size);
  at::Tensor next = p_in_place ? param.mul_(decay).sub_(update) : at::sub(at::mul(param, decay), update, 1);
  return {next, m, v};
}

std::vector<at::Tensor> AdamWSplitReference(const at::Tensor& hi, const at::Tensor& lo, const at::Tensor& grad,
                                            const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                                            const at::Tensor& decay, const at::Tensor& step_size,
                                            const at::Tensor& bc2_sqrt, const AdamWConstants& c,
                                            const bool in_place[4]) {
  // The joined parameter is a temporary: updated in place whatever the caller donated.
  const bool state_in_place[3] = {true, in_place != nullptr && in_place[2], in_place != nullptr && in_place[3]};
  std::vector<at::Tensor> updated = AdamWReference(JoinSplitTensor(hi, lo), grad, exp_avg, exp_avg_sq, decay,
                                                   step_size, bc2_sqrt, c, state_in_place);
  auto [next_hi, next_lo] = SplitTensorToBf16(updated[0]);
  if (in_place != nullptr && in_place[0]) next_hi = hi.copy_(next_hi);
  if (in_place != nullptr && in_place[1]) next_lo = lo.copy_(next_lo);
  return {next_hi, next_lo, updated[1], updated[2]};
}

std::vector<at::Tensor> AdamWReferenceOf(bool split, const std::vector<at::Tensor>& o, const AdamWConstants& c,
                                         const bool* in_place) {
  if (split) {
    return AdamWSplitReference(o[kAdamWSplitHi], o[kAdamWSplitLo], o[kAdamWSplitGrad], o[kAdamWSplitExpAvg],
                               o[kAdamWSplitExpAvgSq], o[kAdamWSplitDecay], o[kAdamWSplitStepSize],
                               o[kAdamWSplitBc2Sqrt], c, in_place);
  }
  return AdamWReference(o[kAdamWParam], o[kAdamWGrad], o[kAdamWExpAvg], o[kAdamWExpAvgSq], o[kAdamWDecay],
                        o[kAdamWStepSize], o[kAdamWBc2Sqrt], c, in_place);
}

}  // namespace magi
