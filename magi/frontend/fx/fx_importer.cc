#include "magi/frontend/fx/fx_importer.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/frontend/capture/functional_variants.h"
#include "magi/frontend/fx/fx_graph.pb.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

using fx::FxArg;
using fx::FxExport;
using fx::FxNode;
using fx::FxTensorMeta;

absl::StatusOr<DType> TorchDType(absl::string_view name) {
  static const auto* names = new std::map<std::string, DType, std::less<>>{
      {"float32", DType::kFloat32},   {"float", DType::kFloat32},   {"float64", DType::kFloat64},
      {"double", DType::kFloat64},    {"float16", DType::kFloat16}, {"half", DType::kFloat16},
      {"bfloat16", DType::kBFloat16}, {"int64", DType::kInt64},     {"long", DType::kInt64},
      {"int32", DType::kInt32},       {"int", DType::kInt32},       {"int16", DType::kInt16},
      {"int8", DType::kInt8},         {"uint8", DType::kUInt8},     {"bool", DType::kBool},
  };
  absl::string_view bare = absl::StripPrefix(name, "torch.");
  auto it = names->find(bare);
  if (it == names->end()) return absl::InvalidArgumentError(absl::StrCat("unsupported dtype '", name, "'"));
  return it->second;
}

absl::StatusOr<TensorType> TypeOf(const FxTensorMeta& meta) {
  TensorType type;
  MAGI_ASSIGN_OR_RETURN(type.dtype, TorchDType(meta.dtype()));
  type.sizes.assign(meta.shape().begin(), meta.shape().end());
  std::vector<int64_t> strides(meta.stride().begin(), meta.stride().end());
  if (!strides.empty() && strides.size() != type.sizes.size()) {
    return absl::InvalidArgumentError("shape and stride have different ranks");
  }
  if (!strides.empty() && strides != ContiguousStrides(type.sizes)) type.strides = strides;
  return type;
}

// c10::Layout and c10::MemoryFormat by the names Python prints.
absl::StatusOr<int64_t> EnumValue(const FxArg& arg) {
  static const auto* values = new std::map<std::string, int64_t, std::less<>>{
      {"strided", 0},          {"torch.strided", 0},          {"contiguous_format", 0}, {"torch.contiguous_format", 0},
      {"preserve_format", 1},  {"torch.preserve_format", 1},  {"channels_last", 2},     {"torch.channels_last", 2},
      {"channels_last_3d", 3}, {"torch.channels_last_3d", 3},
  };
  if (arg.kind_case() == FxArg::kI) return arg.i();
  const std::string& name = arg.kind_case() == FxArg::kLayout ? arg.layout() : arg.memory_format();
  auto it = values->find(name);
  if (it == values->end())
    return absl::InvalidArgumentError(absl::StrCat("unsupported layout or memory format '", name, "'"));
  return it->second;
}

absl::StatusOr<double> FloatOf(const FxArg& arg) {
  switch (arg.kind_case()) {
    case FxArg::kF:
      return arg.f();
    case FxArg::kI:
      return static_cast<double>(arg.i());
    case FxArg::kSpecialFloat:
      if (arg.special_float() == "inf") return std::numeric_limits<double>::infinity();
      if (arg.special_float() == "-inf") return -std::numeric_limits<double>::infinity();
      if (arg.special_float() == "nan") return std::numeric_limits<double>::quiet_NaN();
      break;
    default:
      break;
  }
  return absl::InvalidArgumentError("expected a number");
}

class Importer {
 public:
  Importer(const FxExport& proto, std::string source) : proto_(proto), source_(std::move(source)) {}

  absl::StatusOr<FxImport> Run() {
    if (proto_.format() != "magi-fx" || proto_.version() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": not a magi-fx version 1 file (format '",
                                                     proto_.format(), "', version ", proto_.version(), ")"));
    }
    std::string graph_name = proto_.graph_name().empty() ? "forward" : proto_.graph_name();
    auto module = std::make_unique<Module>(graph_name);
    module_ = module.get();
    for (const auto& [name, size] : proto_.process_groups()) {
      // FX names groups by number ("0"); the IR wants identifiers.
      std::string ir_name = IsValidArgumentName(name) ? name : absl::StrCat("group_", name);
      group_names_[name] = ir_name;
      module_->AddProcessGroup({ir_name, ir_name, size, {}});
    }
    graph_ = module_->AddGraph(graph_name);
    for (const FxNode& node : proto_.nodes()) {
      absl::Status status = ImportNode(node);
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat(source_, ": node '", node.name(), "' (", node.op(),
                                         node.target().empty() ? "" : " " + node.target(), "): ", status.message()));
      }
    }
    if (!saw_output_) return absl::InvalidArgumentError(absl::StrCat(source_, ": the graph has no output node"));
    if (proto_.kind() == "joint") AnnotatePhases();
    absl::Status verified = VerifyModule(*module_);
    if (!verified.ok()) {
      return absl::InternalError(absl::StrCat(source_, ": the imported graph does not verify: ", verified.message()));
    }
    FxImport result;
    result.module = std::move(module);
    result.graph_name = graph_name;
    result.kind = proto_.kind();
    result.torch_version = proto_.torch_version();
    return result;
  }

 private:
  absl::Status ImportNode(const FxNode& node) {
    if (node.name().empty()) return absl::InvalidArgumentError("a node without a name");
    if (values_.contains(node.name())) return absl::InvalidArgumentError("the name is used twice");
    if (node.op() == "placeholder") return ImportPlaceholder(node);
    if (node.op() == "output") return ImportOutput(node);
    if (node.op() != "call_function") {
      return absl::UnimplementedError("only placeholder, call_function and output nodes are supported");
    }
    if (node.target() == "getitem" || node.target() == "_operator.getitem") return ImportGetItem(node);
    std::string ns = node.target().substr(0, node.target().find("::"));
    if (ns == "_c10d_functional" || ns == "c10d_functional") return ImportCollective(node);
    return ImportAtenOp(node);
  }

  // A joint trace runs forward and the loss, then autograd's backward: nodes up to the one
  // that makes the loss (the first output) are forward, the rest backward. Passes that
  // trade memory across that boundary (AutoRecompute, resharding) read these phases.
  void AnnotatePhases() {
    if (graph_->outputs().empty() || graph_->outputs()[0].value->producer() == nullptr) return;
    const Node* loss = graph_->outputs()[0].value->producer();
    Phase phase = Phase::kForward;
    for (Node* node : graph_->nodes()) {
      node->mutable_annotations().phase = phase;
      if (node == loss) phase = Phase::kBackward;
    }
  }

  absl::Status ImportPlaceholder(const FxNode& node) {
    if (node.meta_size() != 1 || node.meta(0).absent())
      return absl::InvalidArgumentError("needs one tensor's metadata");
    MAGI_ASSIGN_OR_RETURN(TensorType type, TypeOf(node.meta(0)));
    InputRole role = InputRole::kData;
    if (node.role() == "param") {
      role = InputRole::kParam;
    } else if (node.role() == "buffer") {
      role = InputRole::kBuffer;
    } else if (!node.role().empty() && node.role() != "data") {
      return absl::InvalidArgumentError(absl::StrCat("unknown placeholder role '", node.role(), "'"));
    }
    if (graph_->FindValue(node.name()) != nullptr) return absl::InvalidArgumentError("the name is used twice");
    Value* input = graph_->AddInput(node.name(), Type::Tensor(std::move(type)), role);
    values_[node.name()] = {input};
    root_of_[input] = input;
    return absl::OkStatus();
  }

  absl::Status ImportOutput(const FxNode& node) {
    if (saw_output_) return absl::InvalidArgumentError("a second output node");
    saw_output_ = true;
    std::vector<const FxArg*> items;
    if (node.args_size() == 1 && node.args(0).kind_case() == FxArg::kList) {
      for (const FxArg& item : node.args(0).list().items()) items.push_back(&item);
    } else {
      for (const FxArg& item : node.args()) items.push_back(&item);
    }
    for (size_t k = 0; k < items.size(); ++k) {
      std::string name =
          k < static_cast<size_t>(proto_.output_names_size()) ? proto_.output_names(k) : absl::StrCat("output.", k);
      if (items[k]->kind_case() == FxArg::kNone) continue;  // e.g. a gradient that does not exist
      MAGI_ASSIGN_OR_RETURN(Value * value, TensorOperand(*items[k]));
      graph_->AddOutput(name, value);
    }
    // Inputs written in place (BatchNorm running statistics): their final values.
    for (Value* input : graph_->inputs()) {
      auto it = latest_.find(input);
      if (it != latest_.end()) graph_->AddOutput(input->name() + ".updated", it->second);
    }
    return absl::OkStatus();
  }

  absl::Status ImportGetItem(const FxNode& node) {
    if (node.args_size() != 2 || node.args(0).kind_case() != FxArg::kNode || node.args(1).kind_case() != FxArg::kI) {
      return absl::InvalidArgumentError("getitem takes (node, index)");
    }
    auto it = values_.find(node.args(0).node());
    if (it == values_.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown node '", node.args(0).node(), "'"));
    int64_t index = node.args(1).i();
    if (index < 0 || index >= static_cast<int64_t>(it->second.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("index ", index, " of a node with ", it->second.size(), " results"));
    }
    values_[node.name()] = {it->second[index]};  // null: a None result (an error only if used as a tensor)
    return absl::OkStatus();
  }

  // all_gather_into_tensor / reduce_scatter_tensor / all_reduce start a Magi collective;
  // wait_tensor is its wait.
  absl::Status ImportCollective(const FxNode& node) {
    absl::string_view op = absl::string_view(node.target()).substr(node.target().find("::") + 2);
    op = op.substr(0, op.find('.'));
    if (op == "wait_tensor") {
      if (node.args_size() != 1 || node.args(0).kind_case() != FxArg::kNode) {
        return absl::InvalidArgumentError("wait_tensor takes one tensor");
      }
      auto it = pending_.find(node.args(0).node());
      if (it == pending_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("waits on '", node.args(0).node(), "', which is no collective"));
      }
      Node* wait = AddWait(*graph_, it->second);
      values_[node.name()] = {wait->result(0)};
      return absl::OkStatus();
    }
    CollectiveKind kind;
    std::string reduce_op = "sum";
    std::string group_name;
    auto string_arg = [&](int index, absl::string_view name) -> absl::StatusOr<std::string> {
      const FxArg* arg = index < node.args_size() ? &node.args(index) : nullptr;
      auto kw = node.kwargs().find(std::string(name));
      if (arg == nullptr && kw != node.kwargs().end()) arg = &kw->second;
      if (arg == nullptr || arg->kind_case() != FxArg::kS) {
        return absl::InvalidArgumentError(absl::StrCat(op, " needs the string argument '", name, "'"));
      }
      return arg->s();
    };
    if (op == "all_gather_into_tensor") {
      kind = CollectiveKind::kAllGather;
      MAGI_ASSIGN_OR_RETURN(group_name, string_arg(2, "group_name"));
    } else if (op == "reduce_scatter_tensor") {
      kind = CollectiveKind::kReduceScatter;
      MAGI_ASSIGN_OR_RETURN(reduce_op, string_arg(1, "reduce_op"));
      MAGI_ASSIGN_OR_RETURN(group_name, string_arg(3, "group_name"));
    } else if (op == "all_reduce") {
      kind = CollectiveKind::kAllReduce;
      MAGI_ASSIGN_OR_RETURN(reduce_op, string_arg(1, "reduce_op"));
      MAGI_ASSIGN_OR_RETURN(group_name, string_arg(2, "group_name"));
    } else {
      return absl::UnimplementedError(absl::StrCat("the functional collective '", op, "' has no Magi mapping yet"));
    }
    reduce_op = absl::AsciiStrToLower(reduce_op);
    if (!IsValidReduceOp(reduce_op))
      return absl::InvalidArgumentError(absl::StrCat("unknown reduce_op '", reduce_op, "'"));
    auto renamed = group_names_.find(group_name);
    const ProcessGroup* group = renamed == group_names_.end() ? nullptr : module_->FindProcessGroup(renamed->second);
    if (group == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("process group '", group_name, "' is not listed in the file's process_groups"));
    }
    if (node.args_size() < 1) return absl::InvalidArgumentError("no input tensor");
    MAGI_ASSIGN_OR_RETURN(Value * input, TensorOperand(node.args(0)));
    MAGI_ASSIGN_OR_RETURN(Node * start, AddCollectiveStart(*graph_, kind, {input}, *group, reduce_op));
    pending_[node.name()] = start;
    values_[node.name()] = {};  // only wait_tensor may read it
    return absl::OkStatus();
  }

  absl::Status ImportAtenOp(const FxNode& node) {
    std::vector<std::string> parts = absl::StrSplit(node.target(), absl::MaxSplits('.', 1));
    c10::OperatorName name(parts[0], parts.size() > 1 && parts[1] != "default" ? parts[1] : "");
    c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op.has_value() || !op->hasSchema()) {
      return absl::NotFoundError(absl::StrCat("LibTorch ", TORCH_VERSION, " has no operator ", node.target(),
                                              " (the graph was exported with torch ", proto_.torch_version(), ")"));
    }
    MAGI_RETURN_IF_ERROR(IsolateRunningStatistics(*op, node));
    // make_fx records Python numbers passed where the schema wants a Tensor (x.add_(1));
    // eager wraps them, Magi uses the op's Scalar overload, which computes the same.
    if (std::optional<c10::OperatorHandle> scalar_variant = ScalarVariant(*op, node)) op = *scalar_variant;
    const c10::FunctionSchema& schema = op->schema();
    std::vector<size_t> mutated = MutatedArguments(schema);
    const c10::FunctionSchema* node_schema = &schema;
    c10::optional<c10::OperatorHandle> functional;
    if (!mutated.empty()) {
      functional = FindFunctionalVariant(*op);
      if (!functional) return absl::UnimplementedError("it writes to its inputs and has no functional variant");
      node_schema = &functional->schema();
    }
    std::vector<NodeArg> args;
    size_t functional_index = 0;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      if (!mutated.empty() && IsOutArgument(schema, i)) continue;
      const c10::Argument& argument = node_schema->arguments().at(functional_index++);
      const FxArg* given = i < static_cast<size_t>(node.args_size()) ? &node.args(i) : nullptr;
      auto kw = node.kwargs().find(argument.name());
      if (given == nullptr && kw != node.kwargs().end()) given = &kw->second;
      std::string arg_name = argument.kwarg_only() ? argument.name() : std::string();
      absl::StatusOr<NodeArg> arg =
          given != nullptr ? ArgumentOf(argument, *given, arg_name) : DefaultOf(argument, arg_name);
      if (!arg.ok())
        return absl::Status(arg.status().code(),
                            absl::StrCat("argument '", argument.name(), "': ", arg.status().message()));
      args.push_back(*std::move(arg));
    }
    if (node.args_size() > static_cast<int>(schema.arguments().size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.args_size(), " arguments for a schema of ", schema.arguments().size()));
    }
    std::vector<Type> types;
    std::vector<int> position_of_result;  // return position -> result index (-1: absent)
    for (const FxTensorMeta& meta : node.meta()) {
      if (meta.absent()) {
        position_of_result.push_back(-1);
        continue;
      }
      MAGI_ASSIGN_OR_RETURN(TensorType type, TypeOf(meta));
      position_of_result.push_back(static_cast<int>(types.size()));
      types.push_back(Type::Tensor(std::move(type)));
    }
    if (!mutated.empty() && types.size() != mutated.size()) {
      return absl::InvalidArgumentError(absl::StrCat("an in-place op writing ", mutated.size(),
                                                     " tensors needs as many tensor metas, got ", types.size()));
    }
    std::string op_name = compat::OpNameOf(node_schema->operator_name());
    std::vector<std::string> names;
    for (size_t r = 0; r < types.size(); ++r)
      names.push_back(types.size() == 1 ? node.name() : absl::StrCat(node.name(), ".", r));
    for (std::string& result_name : names) {
      if (graph_->FindValue(result_name) != nullptr) result_name = graph_->FreshName(result_name + ".");
    }
    Node* created = graph_->AddNode(op_name, std::move(args), std::move(types), nullptr, std::move(names));
    std::vector<Value*>& results = values_[node.name()];
    for (int index : position_of_result) results.push_back(index < 0 ? nullptr : created->result(index));
    // Later uses of what an in-place op wrote read the new value.
    for (size_t k = 0; k < mutated.size(); ++k) {
      const FxArg* written = mutated[k] < static_cast<size_t>(node.args_size()) ? &node.args(mutated[k]) : nullptr;
      if (written == nullptr || written->kind_case() != FxArg::kNode) {
        return absl::UnimplementedError("writes to a tensor that is not a positional node argument");
      }
      Value* old_value = values_.at(written->node()).at(0);
      Value* new_value = created->result(static_cast<int>(k));
      values_[written->node()] = {new_value};
      auto root = root_of_.find(old_value);
      if (root != root_of_.end()) {
        root_of_[new_value] = root->second;
        latest_[root->second] = new_value;
      }
    }
    return absl::OkStatus();
  }

  // Batch norm in training updates running_mean / running_var inside the kernel (1.13's
  // schema does not say so). The op gets copies of them, which then are the buffers'
  // new values (outputs "<buffer>.updated"), so graph inputs are never written.
  absl::Status IsolateRunningStatistics(const c10::OperatorHandle& op, const FxNode& node) {
    const std::string& name = op.schema().name();
    if (name != "aten::native_batch_norm" && name != "aten::_native_batch_norm_legit") return absl::OkStatus();
    const auto& arguments = op.schema().arguments();
    int training = -1;
    for (size_t i = 0; i < arguments.size(); ++i)
      training = arguments[i].name() == "training" ? static_cast<int>(i) : training;
    if (training < 0 || training >= node.args_size() || node.args(training).kind_case() != FxArg::kB ||
        !node.args(training).b()) {
      return absl::OkStatus();
    }
    for (int i = 0; i < std::min(training, node.args_size()); ++i) {
      const std::string& arg_name = arguments[i].name();
      if ((arg_name != "running_mean" && arg_name != "running_var") || node.args(i).kind_case() != FxArg::kNode)
        continue;
      MAGI_ASSIGN_OR_RETURN(Value * stat, TensorOperand(node.args(i)));
      Node* copy = graph_->AddNode("aten::clone", {NodeArg(stat), NodeArg(Attribute(NoneAttr{}), "memory_format")},
                                   {stat->type()}, nullptr, {graph_->FreshName(stat->name() + ".")});
      values_[node.args(i).node()] = {copy->result(0)};
      auto root = root_of_.find(stat);
      if (root != root_of_.end()) {
        root_of_[copy->result(0)] = root->second;
        latest_[root->second] = copy->result(0);
      }
    }
    return absl::OkStatus();
  }

  static bool IsNumber(const FxArg& arg) {
    return arg.kind_case() == FxArg::kI || arg.kind_case() == FxArg::kF || arg.kind_case() == FxArg::kB ||
           arg.kind_case() == FxArg::kSpecialFloat;
  }

  bool IsNoneResult(const std::string& node_name) const {
    auto it = values_.find(node_name);
    return it != values_.end() && it->second.size() == 1 && it->second[0] == nullptr && !pending_.contains(node_name);
  }

  // The overload that takes Scalars where `node` passes numbers for Tensor arguments
  // ("Tensor" -> "Scalar" in the overload name, same argument names), if it needs one.
  std::optional<c10::OperatorHandle> ScalarVariant(const c10::OperatorHandle& op, const FxNode& node) const {
    const c10::FunctionSchema& schema = op.schema();
    bool needs = false;
    for (size_t i = 0; i < schema.arguments().size() && i < static_cast<size_t>(node.args_size()); ++i) {
      needs |=
          compat::ClassifyArgument(schema.arguments()[i]).kind == compat::ArgKind::kTensor && IsNumber(node.args(i));
    }
    if (!needs) return std::nullopt;
    std::string overload = schema.overload_name();
    size_t at = overload.find("Tensor");
    std::vector<std::string> candidates;
    if (at != std::string::npos) candidates.push_back(overload.substr(0, at) + "Scalar" + overload.substr(at + 6));
    candidates.push_back("Scalar");
    for (const std::string& candidate : candidates) {
      c10::optional<c10::OperatorHandle> variant =
          c10::Dispatcher::singleton().findOp(c10::OperatorName(schema.name(), candidate));
      if (!variant.has_value() || !variant->hasSchema()) continue;
      const auto& args = variant->schema().arguments();
      if (args.size() != schema.arguments().size()) continue;
      bool same = true;
      for (size_t i = 0; i < args.size(); ++i) same &= args[i].name() == schema.arguments()[i].name();
      if (same) return *variant;
    }
    return std::nullopt;
  }

  absl::StatusOr<Value*> TensorOperand(const FxArg& arg) {
    if (arg.kind_case() != FxArg::kNode) return absl::InvalidArgumentError("expected a tensor (a node reference)");
    auto it = values_.find(arg.node());
    if (it == values_.end()) return absl::InvalidArgumentError(absl::StrCat("unknown node '", arg.node(), "'"));
    if (it->second.size() != 1 || it->second[0] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", arg.node(), "' is not a single tensor",
                       pending_.contains(arg.node()) ? " (a collective not yet waited for)" : ""));
    }
    return it->second[0];
  }

  absl::StatusOr<NodeArg> ArgumentOf(const c10::Argument& argument, const FxArg& arg, const std::string& name) {
    compat::ArgType type = compat::ClassifyArgument(argument);
    if (arg.kind_case() == FxArg::kNone) {
      if (!type.optional && type.kind != compat::ArgKind::kTensor)
        return absl::InvalidArgumentError("None for a non-optional argument");
      return NodeArg(Attribute(NoneAttr{}), name);
    }
    auto list_items = [&]() -> absl::StatusOr<const google::protobuf::RepeatedPtrField<FxArg>*> {
      if (arg.kind_case() != FxArg::kList) return absl::InvalidArgumentError("expected a list");
      return &arg.list().items();
    };
    switch (type.kind) {
      case compat::ArgKind::kTensor: {
        if (IsNumber(arg)) return absl::InvalidArgumentError("a number where the schema wants a tensor");
        if (type.optional && arg.kind_case() == FxArg::kNode && IsNoneResult(arg.node())) {
          return NodeArg(Attribute(NoneAttr{}), name);
        }
        MAGI_ASSIGN_OR_RETURN(Value * value, TensorOperand(arg));
        return NodeArg(value, name);
      }
      case compat::ArgKind::kTensorList:
      case compat::ArgKind::kOptionalTensorList: {
        MAGI_ASSIGN_OR_RETURN(auto items, list_items());
        std::vector<Value*> values;
        for (const FxArg& item : *items) {
          if (item.kind_case() == FxArg::kNone) {
            values.push_back(nullptr);
            continue;
          }
          MAGI_ASSIGN_OR_RETURN(Value * value, TensorOperand(item));
          values.push_back(value);
        }
        return NodeArg(std::move(values), name);
      }
      case compat::ArgKind::kInt:
        if (arg.kind_case() != FxArg::kI) return absl::InvalidArgumentError("expected an int");
        return NodeArg(Attribute(arg.i()), name);
      case compat::ArgKind::kLayout:
      case compat::ArgKind::kMemoryFormat: {
        MAGI_ASSIGN_OR_RETURN(int64_t value, EnumValue(arg));
        return NodeArg(Attribute(value), name);
      }
      case compat::ArgKind::kFloat: {
        MAGI_ASSIGN_OR_RETURN(double value, FloatOf(arg));
        return NodeArg(Attribute(value), name);
      }
      case compat::ArgKind::kBool:
        if (arg.kind_case() != FxArg::kB) return absl::InvalidArgumentError("expected a bool");
        return NodeArg(Attribute(arg.b()), name);
      case compat::ArgKind::kString:
        if (arg.kind_case() != FxArg::kS) return absl::InvalidArgumentError("expected a string");
        return NodeArg(Attribute(arg.s()), name);
      case compat::ArgKind::kScalar:
        if (arg.kind_case() == FxArg::kB) return NodeArg(Attribute(arg.b()), name);
        if (arg.kind_case() == FxArg::kI) return NodeArg(Attribute(arg.i()), name);
        {
          MAGI_ASSIGN_OR_RETURN(double value, FloatOf(arg));
          return NodeArg(Attribute(value), name);
        }
      case compat::ArgKind::kScalarType: {
        if (arg.kind_case() != FxArg::kDtype) return absl::InvalidArgumentError("expected a dtype");
        MAGI_ASSIGN_OR_RETURN(DType dtype, TorchDType(arg.dtype()));
        return NodeArg(Attribute(dtype), name);
      }
      case compat::ArgKind::kDevice: {
        if (arg.kind_case() != FxArg::kDevice) return absl::InvalidArgumentError("expected a device");
        MAGI_ASSIGN_OR_RETURN(Device device, Device::Parse(arg.device()));
        return NodeArg(Attribute(device), name);
      }
      case compat::ArgKind::kIntList: {
        std::vector<int64_t> ints;
        if (arg.kind_case() == FxArg::kI) {
          ints.push_back(arg.i());  // int[1] arguments accept a single int
        } else {
          MAGI_ASSIGN_OR_RETURN(auto items, list_items());
          for (const FxArg& item : *items) {
            if (item.kind_case() != FxArg::kI) return absl::InvalidArgumentError("expected a list of ints");
            ints.push_back(item.i());
          }
        }
        return NodeArg(Attribute(std::move(ints)), name);
      }
      case compat::ArgKind::kFloatList: {
        MAGI_ASSIGN_OR_RETURN(auto items, list_items());
        std::vector<double> floats;
        for (const FxArg& item : *items) {
          MAGI_ASSIGN_OR_RETURN(double value, FloatOf(item));
          floats.push_back(value);
        }
        return NodeArg(Attribute(std::move(floats)), name);
      }
      case compat::ArgKind::kBoolList: {
        MAGI_ASSIGN_OR_RETURN(auto items, list_items());
        std::vector<bool> bools;
        for (const FxArg& item : *items) {
          if (item.kind_case() != FxArg::kB) return absl::InvalidArgumentError("expected a list of bools");
          bools.push_back(item.b());
        }
        return NodeArg(Attribute(std::move(bools)), name);
      }
      case compat::ArgKind::kGenerator:
        return absl::UnimplementedError("explicit generators are not supported");
      case compat::ArgKind::kUnsupported:
        break;
    }
    return absl::UnimplementedError(
        absl::StrCat("arguments of type ", argument.real_type()->str(), " are not supported"));
  }

  // The schema's default for an argument the FX node left out.
  absl::StatusOr<NodeArg> DefaultOf(const c10::Argument& argument, const std::string& name) {
    if (!argument.default_value().has_value()) return absl::InvalidArgumentError("missing and without a default");
    const c10::IValue& value = *argument.default_value();
    compat::ArgType type = compat::ClassifyArgument(argument);
    if (value.isNone()) return NodeArg(Attribute(NoneAttr{}), name);
    if (type.kind == compat::ArgKind::kScalarType && value.isInt()) {
      MAGI_ASSIGN_OR_RETURN(DType dtype, compat::FromScalarType(static_cast<c10::ScalarType>(value.toInt())));
      return NodeArg(Attribute(dtype), name);
    }
    if (value.isBool()) return NodeArg(Attribute(value.toBool()), name);
    if (compat::IsIntLike(value)) {
      MAGI_ASSIGN_OR_RETURN(int64_t i, compat::ToInt(value));
      if (type.kind == compat::ArgKind::kFloat) return NodeArg(Attribute(static_cast<double>(i)), name);
      if (type.kind == compat::ArgKind::kIntList) return NodeArg(Attribute(std::vector<int64_t>{i}), name);
      return NodeArg(Attribute(i), name);
    }
    if (value.isDouble()) return NodeArg(Attribute(value.toDouble()), name);
    if (value.isString()) return NodeArg(Attribute(value.toStringRef()), name);
    if (type.kind == compat::ArgKind::kIntList) {
      MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> ints, compat::ToIntList(value));
      return NodeArg(Attribute(std::move(ints)), name);
    }
    if (value.isDoubleList()) return NodeArg(Attribute(value.toDoubleVector()), name);
    if (value.isBoolList()) {
      std::vector<bool> bools;
      for (bool b : value.toBoolList()) bools.push_back(b);
      return NodeArg(Attribute(std::move(bools)), name);
    }
    return absl::UnimplementedError(absl::StrCat("the default value ", value.tagKind(), " is not supported"));
  }

  const FxExport& proto_;
  std::string source_;
  Module* module_ = nullptr;
  Graph* graph_ = nullptr;
  bool saw_output_ = false;
  absl::flat_hash_map<std::string, std::vector<Value*>> values_;  // FX node -> results by return position
  absl::flat_hash_map<std::string, Node*> pending_;               // functional collective -> its start
  absl::flat_hash_map<std::string, std::string> group_names_;     // FX process group -> IR process group
  absl::flat_hash_map<const Value*, Value*> root_of_;             // value -> the input it is a new version of
  absl::flat_hash_map<Value*, Value*> latest_;                    // mutated input -> its final value
};

absl::StatusOr<FxExport> ParseExport(absl::string_view json, absl::string_view source) {
  FxExport proto;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &proto, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid magi-fx JSON file: ", status.ToString()));
  }
  return proto;
}

}  // namespace

absl::StatusOr<FxImport> ImportFxJson(absl::string_view json, absl::string_view source) {
  MAGI_ASSIGN_OR_RETURN(FxExport proto, ParseExport(json, source));
  return Importer(proto, std::string(source)).Run();
}

absl::StatusOr<FxImport> ImportFxFile(const std::string& json_path) {
  MAGI_ASSIGN_OR_RETURN(std::string json, ReadFile(json_path));
  MAGI_ASSIGN_OR_RETURN(FxExport proto, ParseExport(json, json_path));
  MAGI_ASSIGN_OR_RETURN(FxImport imported, Importer(proto, json_path).Run());
  if (proto.tensors_size() == 0) return imported;
  std::string dir = json_path.find('/') == std::string::npos ? "." : json_path.substr(0, json_path.rfind('/'));
  std::string tensors_path = absl::StrCat(dir, "/", proto.tensors_file());
  MAGI_ASSIGN_OR_RETURN(std::string bytes, ReadFile(tensors_path));
  for (const fx::FxTensorRecord& record : proto.tensors()) {
    MAGI_ASSIGN_OR_RETURN(DType dtype, TorchDType(record.dtype()));
    std::vector<int64_t> shape(record.shape().begin(), record.shape().end());
    at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(compat::ToScalarType(dtype)));
    if (record.offset() < 0 || record.nbytes() != static_cast<int64_t>(tensor.nbytes()) ||
        record.offset() + record.nbytes() > static_cast<int64_t>(bytes.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(tensors_path, ": tensor '", record.name(), "' (", record.nbytes(), " bytes at ", record.offset(),
                       ") does not fit its shape or the file (", bytes.size(), " bytes)"));
    }
    if (record.nbytes() > 0) std::memcpy(tensor.data_ptr(), bytes.data() + record.offset(), record.nbytes());
    imported.tensors[record.name()] = tensor;
  }
  return imported;
}

}  // namespace magi
