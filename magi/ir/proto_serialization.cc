#include "magi/ir/proto_serialization.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "magi/base/status_macros.h"
#include "magi/base/utf8.h"

namespace magi {
namespace {

void TensorTypeToProto(const TensorType& type, proto::TensorTypeProto* out) {
  out->set_dtype(std::string(DTypeName(type.dtype)));
  for (int64_t size : type.sizes) out->add_sizes(size);
  for (int64_t stride : type.strides) out->add_strides(stride);
  if (type.device.type != DeviceType::kCpu) out->set_device(type.device.ToString());
}

void TypeToProto(const Type& type, proto::TypeProto* out) {
  out->set_kind(type.is_future() ? proto::TypeProto::FUTURE : proto::TypeProto::TENSOR);
  TensorTypeToProto(type.tensor(), out->mutable_tensor());
}

void AttributeToProto(const Node& node, const Attribute& value, proto::AttributeProto* out) {
  switch (value.kind()) {
    case AttrKind::kNone:
      out->mutable_none();
      break;
    case AttrKind::kBool:
      out->set_b(value.as_bool());
      break;
    case AttrKind::kInt:
      out->set_i(value.as_int());
      break;
    case AttrKind::kFloat:
      out->set_f(value.as_float());
      break;
    case AttrKind::kString:
      out->set_s(value.as_string());
      break;
    // mutable_*() first, so that an empty list still sets the oneof.
    case AttrKind::kIntList:
      out->mutable_ints();
      for (int64_t v : value.as_int_list()) out->mutable_ints()->add_values(v);
      break;
    case AttrKind::kFloatList:
      out->mutable_floats();
      for (double v : value.as_float_list()) out->mutable_floats()->add_values(v);
      break;
    case AttrKind::kBoolList:
      out->mutable_bools();
      for (bool v : value.as_bool_list()) out->mutable_bools()->add_values(v);
      break;
    case AttrKind::kDType:
      out->set_dtype(std::string(DTypeName(value.as_dtype())));
      break;
    case AttrKind::kDevice:
      out->set_device(value.as_device().ToString());
      break;
    case AttrKind::kOperand:
      out->set_operand(node.operand(value.as_operand().index)->name());
      break;
    case AttrKind::kOperandList: {
      proto::ValueList* list = out->mutable_operands();
      for (int index : value.as_operand_list().indices) {
        list->add_values(index == OperandListRef::kNoOperand ? "" : node.operand(index)->name());
      }
      break;
    }
  }
}

// --- loading

class Loader {
 public:
  absl::StatusOr<std::unique_ptr<Module>> Load(const proto::ModuleProto& proto) {
    if (proto.ir_version() != kIrVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("IR version ", proto.ir_version(), " is not supported (this build reads ", kIrVersion, ")"));
    }
    auto module = std::make_unique<Module>(proto.name());
    for (const proto::ProcessGroupProto& group : proto.process_groups()) {
      if (group.name().empty()) return absl::InvalidArgumentError("a process group has no name");
      if (module->FindProcessGroup(group.name()) != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("process group @", group.name(), " is defined twice"));
      }
      if (group.size() < 1 || (group.ranks_size() > 0 && group.ranks_size() != group.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("process group @", group.name(), ": size ", group.size(), " with ", group.ranks_size(),
                         " ranks"));
      }
      module->AddProcessGroup({group.name(), group.axis(), group.size(), {group.ranks().begin(), group.ranks().end()}});
    }
    for (const proto::GraphProto& graph_proto : proto.graphs()) {
      if (module->FindGraph(graph_proto.name()) != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("graph @", graph_proto.name(), " is defined twice"));
      }
      MAGI_RETURN_IF_ERROR(LoadGraph(graph_proto, *module->AddGraph(graph_proto.name())));
    }
    return module;
  }

 private:
  absl::StatusOr<TensorType> LoadTensorType(const proto::TensorTypeProto& proto, absl::string_view where) {
    TensorType type;
    std::optional<DType> dtype = ParseDType(proto.dtype());
    if (!dtype) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown dtype '", proto.dtype(), "'"));
    type.dtype = *dtype;
    for (int64_t size : proto.sizes()) {
      if (size < kDynamicDim) return absl::InvalidArgumentError(absl::StrCat(where, ": negative size ", size));
      type.sizes.push_back(size);
    }
    type.strides.assign(proto.strides().begin(), proto.strides().end());
    if (!type.strides.empty() && type.strides.size() != type.sizes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", type.strides.size(), " strides for ", type.sizes.size(), " dimensions"));
    }
    if (absl::StatusOr<int64_t> bytes = type.CheckedSizeInBytes();
        !bytes.ok() && bytes.status().code() == absl::StatusCode::kOutOfRange) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", bytes.status().message()));
    }
    if (!proto.device().empty()) {
      absl::StatusOr<Device> device = Device::Parse(proto.device());
      if (!device.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", device.status().message()));
      type.device = *device;
    }
    return type;
  }

  absl::StatusOr<Type> LoadType(const proto::TypeProto& proto, absl::string_view where) {
    MAGI_ASSIGN_OR_RETURN(TensorType tensor, LoadTensorType(proto.tensor(), where));
    if (proto.kind() == proto::TypeProto::FUTURE) return Type::Future(std::move(tensor));
    if (proto.kind() != proto::TypeProto::TENSOR) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown type kind ", proto.kind()));
    }
    return Type::Tensor(std::move(tensor));
  }

  absl::StatusOr<Value*> LookUp(const Graph& graph, const std::string& name, absl::string_view where) {
    Value* value = graph.FindValue(name);
    if (value == nullptr) return absl::InvalidArgumentError(absl::StrCat(where, ": undefined value %", name));
    return value;
  }

  absl::StatusOr<NodeArg> LoadArgument(const Graph& graph, const proto::ArgumentProto& arg, absl::string_view where) {
    if (!arg.name().empty() && !IsValidArgumentName(arg.name())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": invalid argument name '", arg.name(), "'"));
    }
    const proto::AttributeProto& v = arg.value();
    switch (v.value_case()) {
      case proto::AttributeProto::kNone:
        return NodeArg(Attribute(NoneAttr{}), arg.name());
      case proto::AttributeProto::kB:
        return NodeArg(Attribute(v.b()), arg.name());
      case proto::AttributeProto::kI:
        return NodeArg(Attribute(v.i()), arg.name());
      case proto::AttributeProto::kF:
        return NodeArg(Attribute(v.f()), arg.name());
      case proto::AttributeProto::kS:
        return NodeArg(Attribute(v.s()), arg.name());
      case proto::AttributeProto::kInts:
        return NodeArg(Attribute(std::vector<int64_t>(v.ints().values().begin(), v.ints().values().end())),
                       arg.name());
      case proto::AttributeProto::kFloats:
        return NodeArg(Attribute(std::vector<double>(v.floats().values().begin(), v.floats().values().end())),
                       arg.name());
      case proto::AttributeProto::kBools:
        return NodeArg(Attribute(std::vector<bool>(v.bools().values().begin(), v.bools().values().end())),
                       arg.name());
      case proto::AttributeProto::kDtype: {
        std::optional<DType> dtype = ParseDType(v.dtype());
        if (!dtype) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown dtype '", v.dtype(), "'"));
        return NodeArg(Attribute(*dtype), arg.name());
      }
      case proto::AttributeProto::kDevice: {
        absl::StatusOr<Device> device = Device::Parse(v.device());
        if (!device.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", device.status().message()));
        return NodeArg(Attribute(*device), arg.name());
      }
      case proto::AttributeProto::kOperand: {
        MAGI_ASSIGN_OR_RETURN(Value * value, LookUp(graph, v.operand(), where));
        return NodeArg(value, arg.name());
      }
      case proto::AttributeProto::kOperands: {
        std::vector<Value*> values;
        for (const std::string& name : v.operands().values()) {
          if (name.empty()) {
            values.push_back(nullptr);
            continue;
          }
          MAGI_ASSIGN_OR_RETURN(Value * value, LookUp(graph, name, where));
          values.push_back(value);
        }
        return NodeArg(std::move(values), arg.name());
      }
      case proto::AttributeProto::VALUE_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": argument '", arg.name(), "' has no value"));
  }

  absl::Status CheckNewName(const Graph& graph, const std::string& name, absl::string_view where) {
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": a value has no name"));
    if (graph.FindValue(name) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": value %", name, " is defined twice"));
    }
    return absl::OkStatus();
  }

  absl::Status LoadGraph(const proto::GraphProto& proto, Graph& graph) {
    std::string graph_where = absl::StrCat("graph @", proto.name());
    for (const proto::GraphInputProto& input : proto.inputs()) {
      std::string where = absl::StrCat(graph_where, " input %", input.value().name());
      MAGI_RETURN_IF_ERROR(CheckNewName(graph, input.value().name(), where));
      MAGI_ASSIGN_OR_RETURN(Type type, LoadType(input.value().type(), where));
      std::optional<InputRole> role = input.role().empty() ? InputRole::kData : ParseInputRole(input.role());
      if (!role) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown role '", input.role(), "'"));
      graph.AddInput(input.value().name(), std::move(type), *role);
    }
    for (int n = 0; n < proto.nodes_size(); ++n) {
      const proto::NodeProto& node_proto = proto.nodes(n);
      std::string where = absl::StrCat(graph_where, " node ", n, " (", node_proto.op(), ")");
      if (!IsValidOpName(node_proto.op())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": invalid op name (expected namespace::name, e.g. aten::mm)"));
      }
      std::vector<NodeArg> args;
      for (const proto::ArgumentProto& arg : node_proto.args()) {
        MAGI_ASSIGN_OR_RETURN(NodeArg loaded, LoadArgument(graph, arg, where));
        args.push_back(std::move(loaded));
      }
      std::vector<Type> types;
      std::vector<std::string> names;
      for (const proto::ValueProto& result : node_proto.results()) {
        MAGI_RETURN_IF_ERROR(CheckNewName(graph, result.name(), where));
        for (const std::string& earlier : names) {
          if (earlier == result.name()) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": value %", result.name(), " is defined twice"));
          }
        }
        MAGI_ASSIGN_OR_RETURN(Type type, LoadType(result.type(), where));
        types.push_back(std::move(type));
        names.push_back(result.name());
      }
      NodeAnnotations annotations;
      annotations.module_path = node_proto.module_path();
      if (node_proto.has_stream()) annotations.stream = node_proto.stream();
      if (node_proto.has_schedule()) annotations.schedule = node_proto.schedule();
      if (node_proto.has_bucket()) annotations.bucket = node_proto.bucket();
      if (annotations.stream < -1 || annotations.schedule < -1 || annotations.bucket < -1) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": negative stream, schedule or bucket"));
      }
      if (node_proto.remat() == "save") {
        annotations.remat = RematDecision::kSave;
      } else if (node_proto.remat() == "recompute") {
        annotations.remat = RematDecision::kRecompute;
      } else if (!node_proto.remat().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": unknown remat '", node_proto.remat(), "'"));
      }
      if (!node_proto.phase().empty()) {
        std::optional<Phase> phase = ParsePhase(node_proto.phase());
        if (!phase) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown phase '", node_proto.phase(), "'"));
        annotations.phase = *phase;
      }
      Node* node = graph.AddNode(node_proto.op(), std::move(args), std::move(types), nullptr, std::move(names));
      node->mutable_annotations() = std::move(annotations);
      node->set_location({node_proto.line(), node_proto.column()});
    }
    for (const proto::GraphOutputProto& output : proto.outputs()) {
      std::string where = absl::StrCat(graph_where, " output '", output.name(), "'");
      MAGI_ASSIGN_OR_RETURN(Value * value, LookUp(graph, output.value(), where));
      Value* aliases = nullptr;
      if (!output.aliases().empty()) {
        MAGI_ASSIGN_OR_RETURN(aliases, LookUp(graph, output.aliases(), where));
        if (!aliases->is_graph_input()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": aliases %", output.aliases(), ", which is not a graph input"));
        }
      }
      graph.AddOutput(output.name(), value, aliases);
    }
    return absl::OkStatus();
  }
};

}  // namespace

proto::ModuleProto ModuleToProto(const Module& module) {
  proto::ModuleProto out;
  out.set_ir_version(kIrVersion);
  out.set_name(module.name());
  for (const auto& group : module.process_groups()) {
    proto::ProcessGroupProto* g = out.add_process_groups();
    g->set_name(group->name);
    g->set_axis(group->axis);
    g->set_size(group->size);
    for (int64_t rank : group->ranks) g->add_ranks(rank);
  }
  for (const Graph* graph : module.graphs()) {
    proto::GraphProto* g = out.add_graphs();
    g->set_name(graph->name());
    for (const Value* input : graph->inputs()) {
      proto::GraphInputProto* in = g->add_inputs();
      in->mutable_value()->set_name(input->name());
      TypeToProto(input->type(), in->mutable_value()->mutable_type());
      if (input->role() != InputRole::kData) in->set_role(std::string(InputRoleName(input->role())));
    }
    for (const Node* node : graph->nodes()) {
      proto::NodeProto* n = g->add_nodes();
      n->set_op(node->op());
      for (const Argument& arg : node->args()) {
        proto::ArgumentProto* a = n->add_args();
        a->set_name(arg.name);
        AttributeToProto(*node, arg.value, a->mutable_value());
      }
      for (const Value* result : node->results()) {
        proto::ValueProto* r = n->add_results();
        r->set_name(result->name());
        TypeToProto(result->type(), r->mutable_type());
      }
      const NodeAnnotations& a = node->annotations();
      n->set_module_path(a.module_path);
      if (a.stream >= 0) n->set_stream(a.stream);
      if (a.schedule >= 0) n->set_schedule(a.schedule);
      if (a.remat != RematDecision::kUnset) n->set_remat(std::string(RematDecisionName(a.remat)));
      if (a.bucket >= 0) n->set_bucket(a.bucket);
      if (a.phase != Phase::kUnset) n->set_phase(std::string(PhaseName(a.phase)));
      n->set_line(node->location().line);
      n->set_column(node->location().column);
    }
    for (const GraphOutput& output : graph->outputs()) {
      proto::GraphOutputProto* o = g->add_outputs();
      o->set_name(output.name);
      o->set_value(output.value->name());
      if (output.aliases != nullptr) o->set_aliases(output.aliases->name());
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Module>> ModuleFromProto(const proto::ModuleProto& proto) {
  return Loader().Load(proto);
}

namespace {

// Every string field of `message` (recursively) must be UTF-8; the error names the first
// that is not by its field path, e.g. "graphs[0].nodes[3].results[0].name".
absl::Status CheckStringsAreUtf8(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const google::protobuf::Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    std::string field_path = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    auto check_string = [&](const std::string& text, const std::string& where) -> absl::Status {
      size_t valid = ValidUtf8Prefix(text);
      if (valid == text.size()) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(where, " = \"", absl::CHexEscape(text),
                                                     "\" is not valid UTF-8 (at byte ", valid,
                                                     "); protobuf cannot carry it"));
    };
    bool is_string = field->type() == google::protobuf::FieldDescriptor::TYPE_STRING;
    bool is_message = field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE;
    if (!is_string && !is_message) continue;
    if (field->is_repeated()) {
      for (int k = 0; k < reflection->FieldSize(message, field); ++k) {
        std::string element = absl::StrCat(field_path, "[", k, "]");
        MAGI_RETURN_IF_ERROR(is_string ? check_string(reflection->GetRepeatedString(message, field, k), element)
                                       : CheckStringsAreUtf8(reflection->GetRepeatedMessage(message, field, k), element));
      }
    } else if (is_string) {
      MAGI_RETURN_IF_ERROR(check_string(reflection->GetString(message, field), field_path));
    } else if (reflection->HasField(message, field)) {
      MAGI_RETURN_IF_ERROR(CheckStringsAreUtf8(reflection->GetMessage(message, field), field_path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ModuleToBinary(const Module& module) {
  proto::ModuleProto proto = ModuleToProto(module);
  MAGI_RETURN_IF_ERROR(CheckStringsAreUtf8(proto, ""));
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) return absl::InternalError("protobuf serialization failed");
  return bytes;
}

absl::StatusOr<std::unique_ptr<Module>> ModuleFromBinary(absl::string_view bytes) {
  proto::ModuleProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a valid magi.proto.ModuleProto (", bytes.size(), " bytes could not be decoded)"));
  }
  return ModuleFromProto(proto);
}

absl::StatusOr<std::string> ModuleToJson(const Module& module) {
  proto::ModuleProto proto = ModuleToProto(module);
  MAGI_RETURN_IF_ERROR(CheckStringsAreUtf8(proto, ""));
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  auto status = google::protobuf::util::MessageToJsonString(proto, &json, options);
  if (!status.ok()) return absl::InternalError(absl::StrCat("JSON encoding failed: ", status.ToString()));
  return json;
}

absl::StatusOr<std::unique_ptr<Module>> ModuleFromJson(absl::string_view json) {
  proto::ModuleProto proto;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &proto);
  if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat("invalid IR JSON: ", status.ToString()));
  return ModuleFromProto(proto);
}

}  // namespace magi
