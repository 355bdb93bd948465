#include "magi/frontend/fx/fx_importer.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/frontend/common/alias_tracker.h"
#include "magi/frontend/common/aten_arguments.h"
#include "magi/frontend/common/functional_variants.h"
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

// Ops whose results have a size only their kernel knows, which a static-shape graph cannot
// hold when the trace did not see it: nn.LSTM's oneDNN layer in training returns a workspace
// its backward reads. Traced on real tensors (make_fx) the graph records its real size and
// imports; traced on fake ones (Dynamo's AOTAutograd) the meta kernel says 0 bytes, and a run
// with that size crashed inside oneDNN's backward. Outside training the workspace is empty
// (the kernel returns none) and the layer imports. `traced` finds a node's traced metadata
// by name (nullptr: none).
absl::Status RefuseDataDependentShapes(const c10::FunctionSchema& schema, const FxNode& node,
                                       const std::function<const FxNode*(const std::string&)>& traced) {
  auto empty = [](const FxTensorMeta& meta) {
    int64_t elements = 1;
    for (int64_t size : meta.shape()) elements *= size;
    return elements == 0;
  };
  auto argument = [&](const std::string& name) -> const FxArg* {
    for (size_t i = 0; i < schema.arguments().size() && static_cast<int>(i) < node.args_size(); ++i) {
      if (schema.arguments()[i].name() == name) return &node.args(static_cast<int>(i));
    }
    auto it = node.kwargs().find(name);
    return it == node.kwargs().end() ? nullptr : &it->second;
  };
  bool unknown_workspace = false;
  if (schema.name() == "aten::mkldnn_rnn_layer") {
    constexpr int kWorkspace = 3;  // (output, hy, cy, workspace)
    const FxArg* train = argument("train");
    unknown_workspace = train != nullptr && train->kind_case() == FxArg::kB && train->b() &&
                        node.meta_size() > kWorkspace && empty(node.meta(kWorkspace));
  } else if (schema.name() == "aten::mkldnn_rnn_layer_backward") {
    const FxArg* workspace = argument("workspace");
    const FxNode* producer =
        workspace != nullptr && workspace->kind_case() == FxArg::kNode ? traced(workspace->node()) : nullptr;
    unknown_workspace = producer != nullptr && producer->meta_size() == 1 && empty(producer->meta(0));
  }
  if (!unknown_workspace) return absl::OkStatus();
  return absl::UnimplementedError(
      "nn.LSTM in training: the trace recorded its oneDNN workspace as 0 bytes (fake tensors), a size only the "
      "kernel knows; Magi compiles static shapes, so LSTM training from this trace is not supported (inference is, "
      "and a joint graph traced on real tensors, as tools/fx_export.py does)");
}

absl::StatusOr<DType> TorchDType(absl::string_view name) {
  static const auto* names = new std::map<std::string, DType, std::less<>>{
      {"float32", DType::kFloat32},   {"float", DType::kFloat32},   {"float64", DType::kFloat64},
      {"double", DType::kFloat64},    {"float16", DType::kFloat16}, {"half", DType::kFloat16},
      {"bfloat16", DType::kBFloat16}, {"int64", DType::kInt64},     {"long", DType::kInt64},
      {"int32", DType::kInt32},       {"int", DType::kInt32},       {"int16", DType::kInt16},
      {"int8", DType::kInt8},         {"uint8", DType::kUInt8},     {"bool", DType::kBool},
      {"complex64", DType::kComplex64}, {"cfloat", DType::kComplex64}, {"complex128", DType::kComplex128},
      {"cdouble", DType::kComplex128}, {"uint64", DType::kUInt64},   {"complex32", DType::kComplex32},
      {"chalf", DType::kComplex32},
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
  if (!meta.device().empty()) {
    absl::StatusOr<Device> device = Device::Parse(meta.device());
    if (!device.ok()) return absl::InvalidArgumentError(absl::StrCat("unsupported device '", meta.device(), "'"));
    type.device = *device;
  }
  return type;
}

// PyTorch's functional form of an op that writes to arguments it does not return
// (_native_batch_norm_legit and _batch_norm_with_update write the running statistics and
// return other tensors): "<name>_functional", with the same arguments, unannotated, and the
// op's returns followed by one "<argument>_out" per written argument, in argument order. These
// are the variants PyTorch's own functionalization uses. FindFunctionalVariant does not find
// them: it wants a variant whose results are the written tensors (add_ -> add).
c10::optional<c10::OperatorHandle> FunctionalWithWrittenResults(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::vector<size_t> mutated = MutatedArguments(schema);
  if (mutated.empty()) return c10::nullopt;
  c10::optional<c10::OperatorHandle> candidate = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(schema.name() + "_functional", schema.overload_name()));
  if (!candidate.has_value() || !candidate->hasSchema()) return c10::nullopt;
  const c10::FunctionSchema& functional = candidate->schema();
  if (!MutatedArguments(functional).empty() || functional.arguments().size() != schema.arguments().size() ||
      functional.returns().size() != schema.returns().size() + mutated.size()) {
    return c10::nullopt;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (functional.arguments()[i].name() != schema.arguments()[i].name() ||
        functional.arguments()[i].type()->str() != schema.arguments()[i].type()->str()) {
      return c10::nullopt;
    }
  }
  for (size_t k = 0; k < mutated.size(); ++k) {
    const c10::Argument& written = functional.returns()[schema.returns().size() + k];
    if (written.name() != schema.arguments()[mutated[k]].name() + "_out") return c10::nullopt;
  }
  return candidate;
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

// The tensor lays out its storage densely from offset 0 (contiguous or permuted; the file
// does not say how large the storage is, so covering all of it is assumed, as the exporter's
// new tensors do): AliasTracker::RootOptions::starts_storage.
bool IsDenseFrom0(const FxTensorMeta& meta) {
  if (meta.storage_offset() != 0) return false;
  std::vector<int64_t> sizes(meta.shape().begin(), meta.shape().end());
  std::vector<int64_t> strides(meta.stride().begin(), meta.stride().end());
  return IsDenseLayout(sizes, strides);
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
    aliases_ = std::make_unique<AliasTracker>(graph_);
    ComputeLastUses();
    for (position_ = 0; position_ < proto_.nodes_size(); ++position_) {
      const FxNode& node = proto_.nodes(position_);
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
  // The last node position that reads each FX node (for the aliasing check in Write).
  void ComputeLastUses() {
    std::function<void(const FxArg&, int)> visit = [&](const FxArg& arg, int position) {
      if (arg.kind_case() == FxArg::kNode) last_use_[arg.node()] = position;
      if (arg.kind_case() == FxArg::kList) {
        for (const FxArg& item : arg.list().items()) visit(item, position);
      }
    };
    for (int i = 0; i < proto_.nodes_size(); ++i) {
      for (const FxArg& arg : proto_.nodes(i).args()) visit(arg, i);
      for (const auto& [name, arg] : proto_.nodes(i).kwargs()) visit(arg, i);
    }
  }

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
    } else if (node.role() == "buffer" || node.role() == "constant") {
      role = InputRole::kBuffer;  // the IR has no constant role: a constant is a buffer nobody writes
    } else if (!node.role().empty() && node.role() != "data") {
      return absl::InvalidArgumentError(absl::StrCat("unknown placeholder role '", node.role(), "'"));
    }
    if (graph_->FindValue(node.name()) != nullptr) return absl::InvalidArgumentError("the name is used twice");
    Value* input = graph_->AddInput(node.name(), Type::Tensor(std::move(type)), role);
    AliasTracker::RootOptions options;
    options.starts_storage = IsDenseFrom0(node.meta(0));
    AddRoot(node.name(), input, &node.meta(0), options);
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
      // A None output (a gradient autograd did not make) would silently drop a result the
      // caller expects; the exporter leaves such outputs out when the user allows it.
      if (items[k]->kind_case() == FxArg::kNone) {
        return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is None"));
      }
      MAGI_ASSIGN_OR_RETURN(Value * value, TensorOperand(*items[k]));
      graph_->AddOutput(name, value);
    }
    // Inputs written in place, directly or through views (BatchNorm running statistics,
    // buffers updated through a slice): their final values.
    for (const auto& [input, value] : aliases_->WrittenInputs()) graph_->AddOutput(input->name() + ".updated", value);
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
    int alias = it->second[index];  // -1: a None result (an error only if used as a tensor)
    values_[node.name()] = {alias};
    if (alias >= 0) {
      auto meta = metas_.find(node.args(0).node());
      if (meta != metas_.end() && index < static_cast<int64_t>(meta->second.size()))
        metas_[node.name()] = {meta->second[index]};
      fx_names_of_root_[aliases_->RootOf(alias)].push_back(node.name());
    }
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
      AddRoot(node.name(), wait->result(0), nullptr, AliasTracker::RootOptions());
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
    values_[node.name()] = {-1};  // only wait_tensor may read it
    return absl::OkStatus();
  }

  // The op's argument `i` (positional, else by keyword), or null when omitted.
  static const FxArg* GivenArgument(const FxNode& node, const c10::FunctionSchema& schema, size_t i) {
    if (i < static_cast<size_t>(node.args_size())) return &node.args(static_cast<int>(i));
    auto kw = node.kwargs().find(schema.arguments()[i].name());
    return kw == node.kwargs().end() ? nullptr : &kw->second;
  }

  absl::Status ImportAtenOp(const FxNode& node) {
    std::vector<std::string> parts = absl::StrSplit(node.target(), absl::MaxSplits('.', 1));
    c10::OperatorName name(parts[0], parts.size() > 1 && parts[1] != "default" ? parts[1] : "");
    c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op.has_value() || !op->hasSchema()) {
      return absl::NotFoundError(absl::StrCat("LibTorch ", TORCH_VERSION, " has no operator ", node.target(),
                                              " (the graph was exported with torch ", proto_.torch_version(), ")"));
    }
    // make_fx records Python numbers passed where the schema wants a Tensor (x.add_(1));
    // eager wraps them, Magi uses the op's Scalar overload, which computes the same.
    if (std::optional<c10::OperatorHandle> scalar_variant = ScalarVariant(*op, node)) op = *scalar_variant;
    const c10::FunctionSchema& schema = op->schema();
    if (node.args_size() > static_cast<int>(schema.arguments().size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.args_size(), " arguments for a schema of ", schema.arguments().size()));
    }
    MAGI_RETURN_IF_ERROR(RefuseDataDependentShapes(schema, node, [&](const std::string& name) -> const FxNode* {
      for (const FxNode& other : proto_.nodes()) {
        if (other.name() == name) return &other;
      }
      return nullptr;
    }));
    using StatCopies = std::vector<std::pair<int, Value*>>;
    MAGI_ASSIGN_OR_RETURN(StatCopies running_stats, IsolateRunningStatistics(*op, node));
    std::vector<size_t> mutated = MutatedArguments(schema);
    const c10::FunctionSchema* node_schema = &schema;
    c10::optional<c10::OperatorHandle> functional;
    // True when the functional variant returns the op's own results and then the new values
    // of the arguments it writes (FunctionalWithWrittenResults).
    bool written_results_appended = false;
    if (!mutated.empty()) {
      functional = FindFunctionalVariant(*op);
      if (!functional) {
        functional = FunctionalWithWrittenResults(*op);
        written_results_appended = functional.has_value();
      }
      if (!functional) return absl::UnimplementedError("it writes to its inputs and has no functional variant");
      node_schema = &functional->schema();
    }
    // as_strided addresses its input's storage, not its elements: it reads the storage's
    // root in the traced layout (and becomes a view of the root).
    int strided_base = -1;
    Value* strided_input = nullptr;
    if ((schema.name() == "aten::as_strided" || schema.name() == "aten::as_strided_") && node.args_size() > 0 &&
        node.args(0).kind_case() == FxArg::kNode && values_.contains(node.args(0).node()) &&
        values_.at(node.args(0).node()).size() == 1 && values_.at(node.args(0).node())[0] >= 0) {
      int alias = values_.at(node.args(0).node())[0];
      MAGI_ASSIGN_OR_RETURN(AliasTracker::StridedInput input,
                            aliases_->AsStridedInput(alias, absl::StrCat("'", node.args(0).node(), "'")));
      strided_base = input.base;
      strided_input = input.value;
    }
    MAGI_ASSIGN_OR_RETURN(
        std::vector<NodeArg> args,
        ConvertCallArguments(schema, functional ? node_schema : nullptr,
                             [&](size_t i) -> absl::StatusOr<std::optional<AtenArg>> {
                               if (i == 0 && strided_input != nullptr) {
                                 return std::optional<AtenArg>(AtenArg::Tensor(strided_input));
                               }
                               for (const auto& [index, copy] : running_stats) {
                                 if (static_cast<size_t>(index) == i) return std::optional<AtenArg>(AtenArg::Tensor(copy));
                               }
                               const FxArg* given = GivenArgument(node, schema, i);
                               if (given == nullptr) return std::optional<AtenArg>();
                               MAGI_ASSIGN_OR_RETURN(AtenArg value, ToAtenArg(*given));
                               return std::optional<AtenArg>(std::move(value));
                             }));
    std::vector<Type> types;
    std::vector<int> position_of_result;  // return position -> result index (-1: absent)
    std::vector<const FxTensorMeta*> metas;
    for (const FxTensorMeta& meta : node.meta()) {
      metas.push_back(meta.absent() ? nullptr : &meta);
      if (meta.absent()) {
        position_of_result.push_back(-1);
        continue;
      }
      MAGI_ASSIGN_OR_RETURN(TensorType type, TypeOf(meta));
      position_of_result.push_back(static_cast<int>(types.size()));
      types.push_back(Type::Tensor(std::move(type)));
    }
    if (written_results_appended) {
      // The written arguments' new values follow the op's own results, which must all be
      // there for the positions to line up.
      if (types.size() != schema.returns().size()) {
        return absl::InvalidArgumentError(absl::StrCat(schema.name(), " returns ", schema.returns().size(),
                                                       " tensors, the file has metas for ", types.size()));
      }
      for (size_t index : mutated) {
        const FxArg* written = GivenArgument(node, schema, index);
        if (written == nullptr || written->kind_case() != FxArg::kNode) {
          return absl::UnimplementedError(absl::StrCat("it writes to its argument '", schema.arguments()[index].name(),
                                                       "', which is not a tensor of the graph"));
        }
        MAGI_ASSIGN_OR_RETURN(Value * current, TensorOperand(*written));
        types.push_back(current->type());
      }
    } else if (!mutated.empty() && types.size() != mutated.size()) {
      return absl::InvalidArgumentError(absl::StrCat("an in-place op writing ", mutated.size(),
                                                     " tensors needs as many tensor metas, got ", types.size()));
    }
    std::string op_name = compat::OpNameOf(node_schema->operator_name());
    std::vector<std::string> names;
    for (size_t r = 0; r < types.size(); ++r) {
      names.push_back(written_results_appended && r >= schema.returns().size()
                          ? absl::StrCat(node.name(), ".", node_schema->returns()[r].name())
                          : types.size() == 1 ? node.name() : absl::StrCat(node.name(), ".", r));
    }
    for (std::string& result_name : names) {
      if (graph_->FindValue(result_name) != nullptr) result_name = graph_->FreshName(result_name + ".");
    }
    Node* created = graph_->AddNode(op_name, std::move(args), std::move(types), nullptr, std::move(names));

    // Batch norm wrote the copies of its running statistics: they are the buffers' new values.
    for (const auto& [index, copy] : running_stats) {
      MAGI_RETURN_IF_ERROR(WriteTo(node.args(index), copy));
    }
    if (!mutated.empty() && !ViewSources(*node_schema).empty() && ViewSources(*node_schema)[0] >= 0) {
      // An in-place view op (as_strided_, transpose_, squeeze_, ...) changes which part of
      // its storage the tensor shows, not the data: from here on the tensor is that view.
      const FxArg* target = GivenArgument(node, schema, mutated[0]);
      if (mutated.size() != 1 || target == nullptr || target->kind_case() != FxArg::kNode) {
        return absl::UnimplementedError("an in-place view op on something other than one tensor");
      }
      int alias = aliases_->AddView(strided_base >= 0 ? strided_base : values_.at(target->node()).at(0), created, 0);
      fx_names_of_root_[aliases_->RootOf(alias)].push_back(node.name());
      values_[target->node()] = {alias};
      metas_[target->node()] = metas;
      values_[node.name()] = {alias};
      metas_[node.name()] = metas;
      return absl::OkStatus();
    }
    if (written_results_appended) {
      // The written arguments take their new values; the op's own results, new tensors, are
      // registered below like any op's.
      for (size_t k = 0; k < mutated.size(); ++k) {
        MAGI_RETURN_IF_ERROR(WriteTo(*GivenArgument(node, schema, mutated[k]),
                                     created->result(static_cast<int>(schema.returns().size() + k))));
      }
    } else if (!mutated.empty()) {
      // The functional variant returns what the in-place op wrote; the node's own results
      // are the written tensors (aliases of its arguments).
      std::vector<int>& results = values_[node.name()];
      for (size_t k = 0; k < mutated.size(); ++k) {
        const FxArg* written = GivenArgument(node, schema, mutated[k]);
        if (written == nullptr || written->kind_case() != FxArg::kNode) {
          return absl::UnimplementedError("it writes to a tensor that is not a node argument");
        }
        MAGI_RETURN_IF_ERROR(WriteTo(*written, created->result(static_cast<int>(k))));
        results.push_back(values_.at(written->node()).at(0));
      }
      metas_[node.name()] = metas;
      return absl::OkStatus();
    }
    // Results that are views of an argument join its storage; the others are new storages.
    std::vector<int> sources = ViewSources(schema);
    bool list_return = schema.returns().size() == 1 && position_of_result.size() != 1;
    std::vector<int>& results = values_[node.name()];
    for (size_t p = 0; p < position_of_result.size(); ++p) {
      int index = position_of_result[p];
      if (index < 0) {
        results.push_back(-1);
        continue;
      }
      int source = list_return ? sources.at(0) : (p < sources.size() ? sources[p] : -1);
      int base = -1;
      if (source >= 0) {
        const FxArg* arg = GivenArgument(node, schema, source);
        if (arg != nullptr && arg->kind_case() == FxArg::kNode) base = values_.at(arg->node()).at(0);
        if (strided_base >= 0) base = strided_base;
      }
      Value* value = created->result(index);
      if (base < 0) {
        AliasTracker::RootOptions options;
        options.starts_storage = metas[p] == nullptr || IsDenseFrom0(*metas[p]);
        AddRoot(node.name(), value, metas[p], options);
        continue;
      }
      if (MayOrMayNotAlias(schema)) {
        // Only the storages the exporter saw can say whether this one is a view.
        const FxTensorMeta* in = MetaOf(*GivenArgument(node, schema, source));
        if (metas[p] == nullptr || in == nullptr || metas[p]->storage() == 0 || in->storage() == 0) {
          AliasTracker::RootOptions options;
          options.uncertain = absl::StrCat(op_name, " (node '", node.name(), "') may return a view or a copy");
          AddRoot(node.name(), value, metas[p], options);
          aliases_->MarkUncertain(base, options.uncertain);
          continue;
        }
        if (metas[p]->storage() != in->storage()) {
          AddRoot(node.name(), value, metas[p], AliasTracker::RootOptions());
          continue;
        }
      }
      int alias = aliases_->AddView(base, created, index);
      results.push_back(alias);
      fx_names_of_root_[aliases_->RootOf(alias)].push_back(node.name());
    }
    metas_[node.name()] = metas;
    return absl::OkStatus();
  }

  // Registers `value` as a new storage and as the next result of FX node `name`.
  void AddRoot(const std::string& name, Value* value, const FxTensorMeta* meta, AliasTracker::RootOptions options) {
    int alias = aliases_->AddRoot(value, std::move(options));
    values_[name].push_back(alias);
    metas_[name].push_back(meta);
    fx_names_of_root_[alias].push_back(name);
    if (meta != nullptr && meta->storage() != 0) roots_of_storage_[meta->storage()].push_back(alias);
  }

  const FxTensorMeta* MetaOf(const FxArg& arg) const {
    if (arg.kind_case() != FxArg::kNode) return nullptr;
    auto it = metas_.find(arg.node());
    return it == metas_.end() || it->second.size() != 1 ? nullptr : it->second[0];
  }

  // The in-place write of `value` into the tensor `written` names.
  absl::Status WriteTo(const FxArg& written, Value* value) {
    if (written.kind_case() != FxArg::kNode) return absl::UnimplementedError("it writes to a tensor that is no node");
    auto it = values_.find(written.node());
    if (it == values_.end() || it->second.size() != 1 || it->second[0] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("it writes to '", written.node(), "', which is not a tensor"));
    }
    int alias = it->second[0];
    // Memory the exporter saw shared with tensors that Magi does not know as views of this
    // one (and that are read later) would miss the write: refuse instead of guessing.
    const FxTensorMeta* meta = MetaOf(written);
    if (meta != nullptr && meta->storage() != 0) {
      int root = aliases_->RootOf(alias);
      for (int other : roots_of_storage_[meta->storage()]) {
        if (other == root) continue;
        for (const std::string& name : fx_names_of_root_[other]) {
          auto last = last_use_.find(name);
          if (last != last_use_.end() && last->second > position_) {
            return absl::UnimplementedError(absl::StrCat(
                "it writes to '", written.node(), "', whose memory node '", name,
                "' (read later) also uses without being a view Magi knows of; the write cannot be made functional"));
          }
        }
      }
    }
    return aliases_->Write(alias, value);
  }

  // native_batch_norm in training updates running_mean / running_var inside the kernel, and
  // its schema does not say so (1.13 and 2.x alike). The op gets copies of them (argument
  // index, copy), which after the op are the statistics' new values; graph inputs are never
  // written. Its 2.x successors (_native_batch_norm_legit, _batch_norm_with_update) declare
  // the writes and import through their _functional variants instead.
  absl::StatusOr<std::vector<std::pair<int, Value*>>> IsolateRunningStatistics(const c10::OperatorHandle& op,
                                                                              const FxNode& node) {
    std::vector<std::pair<int, Value*>> copies;
    const std::string& name = op.schema().name();
    if (name != "aten::native_batch_norm") return copies;
    const auto& arguments = op.schema().arguments();
    int training = -1;
    for (size_t i = 0; i < arguments.size(); ++i)
      training = arguments[i].name() == "training" ? static_cast<int>(i) : training;
    if (training < 0 || training >= node.args_size() || node.args(training).kind_case() != FxArg::kB ||
        !node.args(training).b()) {
      return copies;
    }
    for (int i = 0; i < std::min(training, node.args_size()); ++i) {
      const std::string& arg_name = arguments[i].name();
      if ((arg_name != "running_mean" && arg_name != "running_var") || node.args(i).kind_case() != FxArg::kNode)
        continue;
      MAGI_ASSIGN_OR_RETURN(Value * stat, TensorOperand(node.args(i)));
      Node* copy = graph_->AddNode("aten::clone", {NodeArg(stat), NodeArg(Attribute(NoneAttr{}), "memory_format")},
                                   {stat->type()}, nullptr, {graph_->FreshName(stat->name() + ".")});
      copies.emplace_back(i, copy->result(0));
    }
    return copies;
  }

  static bool IsNumber(const FxArg& arg) {
    return arg.kind_case() == FxArg::kI || arg.kind_case() == FxArg::kF || arg.kind_case() == FxArg::kB ||
           arg.kind_case() == FxArg::kSpecialFloat;
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

  // The current value of the tensor `arg` names (regenerated if its memory was written since).
  absl::StatusOr<Value*> TensorOperand(const FxArg& arg) {
    if (arg.kind_case() != FxArg::kNode) return absl::InvalidArgumentError("expected a tensor (a node reference)");
    auto it = values_.find(arg.node());
    if (it == values_.end()) return absl::InvalidArgumentError(absl::StrCat("unknown node '", arg.node(), "'"));
    if (it->second.size() != 1 || it->second[0] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", arg.node(), "' is not a single tensor",
                       pending_.contains(arg.node()) ? " (a collective not yet waited for)" : ""));
    }
    return aliases_->Read(it->second[0]);
  }

  // An FX argument as the shared converter's neutral value.
  absl::StatusOr<AtenArg> ToAtenArg(const FxArg& arg) {
    switch (arg.kind_case()) {
      case FxArg::kNone:
        return AtenArg::None();
      case FxArg::kB:
        return AtenArg::Bool(arg.b());
      case FxArg::kI:
        return AtenArg::Int(arg.i());
      case FxArg::kF:
        return AtenArg::Float(arg.f());
      case FxArg::kSpecialFloat: {
        MAGI_ASSIGN_OR_RETURN(double value, FloatOf(arg));
        return AtenArg::Float(value);
      }
      case FxArg::kS:
        return AtenArg::String(arg.s());
      case FxArg::kNode: {
        auto it = values_.find(arg.node());
        if (it == values_.end()) return absl::InvalidArgumentError(absl::StrCat("unknown node '", arg.node(), "'"));
        // A None result of a multi-output op (an absent gradient) passes as an undefined tensor.
        if (it->second.size() == 1 && it->second[0] < 0 && !pending_.contains(arg.node())) {
          return AtenArg::Tensor(nullptr);
        }
        MAGI_ASSIGN_OR_RETURN(Value * value, TensorOperand(arg));
        return AtenArg::Tensor(value);
      }
      case FxArg::kList: {
        std::vector<AtenArg> items;
        for (const FxArg& item : arg.list().items()) {
          MAGI_ASSIGN_OR_RETURN(AtenArg converted, ToAtenArg(item));
          items.push_back(std::move(converted));
        }
        return AtenArg::List(std::move(items));
      }
      case FxArg::kDtype: {
        MAGI_ASSIGN_OR_RETURN(DType dtype, TorchDType(arg.dtype()));
        return AtenArg::OfDType(dtype);
      }
      case FxArg::kDevice: {
        MAGI_ASSIGN_OR_RETURN(Device device, Device::Parse(arg.device()));
        return AtenArg::OfDevice(device);
      }
      case FxArg::kLayout:
      case FxArg::kMemoryFormat: {
        MAGI_ASSIGN_OR_RETURN(int64_t value, EnumValue(arg));
        return AtenArg::Enum(value);
      }
      case FxArg::KIND_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError("an argument with no value");
  }

  const FxExport& proto_;
  std::string source_;
  Module* module_ = nullptr;
  Graph* graph_ = nullptr;
  bool saw_output_ = false;
  int position_ = 0;  // of the node being imported
  std::unique_ptr<AliasTracker> aliases_;
  absl::flat_hash_map<std::string, std::vector<int>> values_;  // FX node -> alias per return position (-1: None)
  absl::flat_hash_map<std::string, std::vector<const FxTensorMeta*>> metas_;  // FX node -> its metas
  absl::flat_hash_map<std::string, int> last_use_;                            // FX node -> last reader's position
  absl::flat_hash_map<int, std::vector<std::string>> fx_names_of_root_;       // root alias -> FX nodes in it
  absl::flat_hash_map<int64_t, std::vector<int>> roots_of_storage_;           // exporter storage -> root aliases
  absl::flat_hash_map<std::string, Node*> pending_;               // functional collective -> its start
  absl::flat_hash_map<std::string, std::string> group_names_;     // FX process group -> IR process group
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
    std::vector<int64_t> stride(record.stride().begin(), record.stride().end());
    absl::StatusOr<c10::ScalarType> scalar_type = compat::ToScalarType(dtype);
    if (!scalar_type.ok()) {
      return absl::Status(scalar_type.status().code(), absl::StrCat(tensors_path, ": tensor '", record.name(),
                                                                    "': ", scalar_type.status().message()));
    }
    at::TensorOptions options = at::TensorOptions().dtype(*scalar_type);
    // With strides, the bytes are the storage the tensor views (a non-contiguous input).
    const bool has_layout = !stride.empty() || record.storage_offset() != 0 || record.storage_numel() != 0;
    at::Tensor storage = has_layout ? at::empty({record.storage_numel()}, options) : at::empty(shape, options);
    if (record.offset() < 0 || record.nbytes() != static_cast<int64_t>(storage.nbytes()) ||
        record.offset() + record.nbytes() > static_cast<int64_t>(bytes.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(tensors_path, ": tensor '", record.name(), "' (", record.nbytes(), " bytes at ", record.offset(),
                       ") does not fit its shape or the file (", bytes.size(), " bytes)"));
    }
    if (record.nbytes() > 0) std::memcpy(storage.data_ptr(), bytes.data() + record.offset(), record.nbytes());
    at::Tensor tensor = storage;
    if (has_layout) {
      int64_t last = record.storage_offset();
      bool empty = false;
      for (size_t d = 0; d < shape.size() && d < stride.size(); ++d) {
        empty |= shape[d] == 0;
        last += (shape[d] - 1) * stride[d];
      }
      if (stride.size() != shape.size() || record.storage_offset() < 0 ||
          (!empty && last >= record.storage_numel())) {
        return absl::InvalidArgumentError(absl::StrCat(tensors_path, ": tensor '", record.name(),
                                                       "': its strides and offset reach past its ",
                                                       record.storage_numel(), " stored elements"));
      }
      tensor = storage.as_strided(shape, stride, record.storage_offset());
    }
    imported.tensors[record.name()] = tensor;
  }
  return imported;
}

}  // namespace magi
