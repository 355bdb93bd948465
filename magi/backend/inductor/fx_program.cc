#include "magi/backend/inductor/fx_program.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cctype>
#include <cmath>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "magi/analysis/op_traits.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/printer.h"

namespace magi::inductor {
namespace {

c10::optional<c10::OperatorHandle> FindSchema(const Node& node) {  // c10::optional: std::optional on 2.x only
  std::vector<std::string> parts = absl::StrSplit(node.op(), absl::MaxSplits('.', 1));
  return c10::Dispatcher::singleton().findSchema({parts[0], parts.size() > 1 ? parts[1] : ""});
}

// torch.ops.aten.<name>.<overload>; the empty overload is "default" in Python.
// torch.ops.NS.NAME.OVERLOAD of `node`'s op; with `in_place`, of its in-place variant
// (NAME_, the same overload: aten::index_put -> torch.ops.aten.index_put_.default).
std::string PythonOp(const Node& node, bool in_place = false) {
  std::vector<std::string> parts = absl::StrSplit(node.op(), absl::MaxSplits('.', 1));
  std::vector<std::string> ns_name = absl::StrSplit(parts[0], "::");
  std::string overload = parts.size() > 1 && !parts[1].empty() ? parts[1] : "default";
  return absl::StrCat("torch.ops.", ns_name[0], ".", ns_name[1], in_place ? "_" : "", ".", overload);
}

std::string PythonDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "torch.float32";
    case DType::kFloat64:
      return "torch.float64";
    case DType::kFloat16:
      return "torch.float16";
    case DType::kBFloat16:
      return "torch.bfloat16";
    case DType::kInt64:
      return "torch.int64";
    case DType::kInt32:
      return "torch.int32";
    case DType::kInt16:
      return "torch.int16";
    case DType::kInt8:
      return "torch.int8";
    case DType::kUInt8:
      return "torch.uint8";
    case DType::kBool:
      return "torch.bool";
    case DType::kComplex64:
      return "torch.complex64";
    case DType::kComplex128:
      return "torch.complex128";
    case DType::kComplex32:  // emitted for the FX source; the backend declines complex partitions
      return "torch.complex32";
    case DType::kUInt64:
      return "torch.uint64";
  }
  return "None";
}

std::string PythonFloat(double value) {
  if (std::isnan(value)) return "float(\"nan\")";
  if (std::isinf(value)) return value > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  return FormatFloat(value);  // shortest text that reads back as the same double
}

// c10::MemoryFormat's values, which boxed calls (and so the IR) carry as ints.
std::optional<std::string> PythonMemoryFormat(int64_t value) {
  switch (value) {
    case static_cast<int64_t>(c10::MemoryFormat::Contiguous):
      return "torch.contiguous_format";
    case static_cast<int64_t>(c10::MemoryFormat::Preserve):
      return "torch.preserve_format";
    case static_cast<int64_t>(c10::MemoryFormat::ChannelsLast):
      return "torch.channels_last";
    case static_cast<int64_t>(c10::MemoryFormat::ChannelsLast3d):
      return "torch.channels_last_3d";
    default:
      return std::nullopt;
  }
}

// The Python text of constant `value` for a schema argument of kind `kind`, or the reason
// there is none.
absl::StatusOr<std::string> PythonConstant(const Attribute& value, compat::ArgKind kind) {
  switch (value.kind()) {
    case AttrKind::kNone:
      return std::string("None");
    case AttrKind::kBool:
      return std::string(value.as_bool() ? "True" : "False");
    case AttrKind::kInt:
      if (kind == compat::ArgKind::kLayout) {
        if (value.as_int() != static_cast<int64_t>(c10::kStrided)) {
          return absl::UnimplementedError(absl::StrCat("layout ", value.as_int(), " is not strided"));
        }
        return std::string("torch.strided");
      }
      if (kind == compat::ArgKind::kMemoryFormat) {
        std::optional<std::string> format = PythonMemoryFormat(value.as_int());
        if (!format) return absl::UnimplementedError(absl::StrCat("unknown memory format ", value.as_int()));
        return *format;
      }
      if (kind == compat::ArgKind::kScalarType) {
        return absl::UnimplementedError("a dtype given as a number");  // the IR holds dtypes as dtypes
      }
      if (kind == compat::ArgKind::kFloat) return PythonFloat(static_cast<double>(value.as_int()));
      return absl::StrCat(value.as_int());
    case AttrKind::kFloat:
      return PythonFloat(value.as_float());
    case AttrKind::kString:
      return PythonString(value.as_string());
    case AttrKind::kIntList:
      return absl::StrCat("[", absl::StrJoin(value.as_int_list(), ", "), "]");
    case AttrKind::kFloatList:
      return absl::StrCat("[",
                          absl::StrJoin(value.as_float_list(), ", ",
                                        [](std::string* out, double v) { out->append(PythonFloat(v)); }),
                          "]");
    case AttrKind::kBoolList:
      return absl::StrCat("[",
                          absl::StrJoin(value.as_bool_list(), ", ",
                                        [](std::string* out, bool v) { out->append(v ? "True" : "False"); }),
                          "]");
    case AttrKind::kDType:
      return PythonDType(value.as_dtype());
    case AttrKind::kDevice:
      return absl::StrCat("torch.device(", PythonString(value.as_device().ToString()), ")");
    case AttrKind::kOperand:
    case AttrKind::kOperandList:
      break;
  }
  return absl::InternalError("an operand is not a constant");
}

// What an op returns, as the program unpacks it.
enum class Returns { kOneTensor, kSeveral };

// How `node`'s schema returns its results, or the reason the program cannot take them.
absl::StatusOr<Returns> ReturnsOf(const Node& node, const c10::FunctionSchema& schema) {
  const auto& returns = schema.returns();
  if (returns.empty()) return absl::UnimplementedError("returns nothing");
  for (const c10::Argument& ret : returns) {
    compat::ArgType type = compat::ClassifyType(ret.real_type());
    if (type.optional) return absl::UnimplementedError(absl::StrCat("returns an optional ", ret.type()->str()));
    if (type.kind == compat::ArgKind::kTensorList && returns.size() == 1) return Returns::kSeveral;
    if (type.kind != compat::ArgKind::kTensor) {
      return absl::UnimplementedError(absl::StrCat("returns a ", ret.type()->str(), ", not tensors"));
    }
  }
  if (static_cast<int>(returns.size()) != node.num_results()) {
    return absl::InvalidArgumentError(
        absl::StrCat("has ", node.num_results(), " results but ", node.op(), " returns ", returns.size()));
  }
  return returns.size() == 1 ? Returns::kOneTensor : Returns::kSeveral;
}

// Checks every argument of `node` against `schema` (see WhyNotFxExpressible); the Python
// text of each is filled in by EmitCall.
absl::Status CheckArguments(const Node& node, const c10::FunctionSchema& schema) {
  const std::vector<Argument>& args = node.args();
  const auto& params = schema.arguments();
  if (args.size() > params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.size(), " arguments, but ", node.op(), " takes ", params.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::Argument& param = params[i];
    if (!args[i].name.empty() && args[i].name != param.name()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " is named '", args[i].name, "' but the schema's is '", param.name(), "'"));
    }
    compat::ArgType type = compat::ClassifyArgument(param);
    if (type.kind == compat::ArgKind::kUnsupported) {
      return absl::UnimplementedError(absl::StrCat("argument '", param.name(), "' has type ", param.type()->str()));
    }
    const Attribute& value = args[i].value;
    if (value.is_operand_ref()) continue;
    if (type.kind == compat::ArgKind::kGenerator && !value.is_none()) {
      return absl::UnimplementedError(absl::StrCat("argument '", param.name(), "' is a generator"));
    }
    absl::StatusOr<std::string> text = PythonConstant(value, type.kind);
    if (!text.ok()) return absl::UnimplementedError(absl::StrCat("argument '", param.name(), "': ", text.status().message()));
  }
  return absl::OkStatus();
}

// Python identifiers for IR value names: [A-Za-z0-9_] kept, anything else '_', a leading
// digit prefixed, keywords and the program's own names avoided, duplicates numbered.
class Names {
 public:
  explicit Names(bool canonical) : canonical_(canonical) {
    for (const char* reserved :
         {"torch", "operator", "g", "build", "GRAPH", "INPUTS", "OUTPUTS", "FORMAT", "False", "None", "True", "and",
          "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else", "except",
          "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass",
          "raise", "return", "try", "while", "with", "yield", "float", "print"}) {
      used_.insert(reserved);
    }
  }
  std::string Take(absl::string_view ir_name) {
    if (canonical_) return absl::StrCat("v", next_++);
    std::string base;
    for (char c : ir_name) base += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
    if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) base = "v" + base;
    std::string name = base;
    for (int k = 1; used_.contains(name); ++k) name = absl::StrCat(base, "_", k);
    used_.insert(name);
    return name;
  }

 private:
  bool canonical_;
  int next_ = 0;
  absl::flat_hash_set<std::string> used_;
};

std::string PythonIntList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// One INPUTS/OUTPUTS entry: (name, dtype, sizes, strides, device).
std::string Signature(absl::string_view name, const TensorType& type) {
  std::vector<int64_t> strides = type.strides.empty() ? ContiguousStrides(type.sizes) : type.strides;
  return absl::StrCat("(", PythonString(name), ", ", PythonDType(type.dtype), ", ", PythonIntList(type.sizes), ", ",
                      PythonIntList(strides), ", ", PythonString(type.device.ToString()), ")");
}

// A comment line holding `text` (an IR line), safe for any characters.
std::string Comment(absl::string_view text) {
  std::string out = "    # ";
  for (char c : text) out += c == '\n' || c == '\r' ? ' ' : c;
  return out + "\n";
}

}  // namespace

std::string PythonString(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through: Python 3 sources are UTF-8
    }
  }
  return out + "\"";
}

std::string WhyNotFxExpressible(const Node& node) {
  if (node.op_namespace() != "aten") return "not an aten op";
  c10::optional<c10::OperatorHandle> op = FindSchema(node);
  if (!op) return absl::StrCat("LibTorch ", TORCH_VERSION, " has no operator ", node.op());
  const c10::FunctionSchema& schema = op->schema();
  if (schema.is_vararg() || schema.is_varret()) return "has a variadic schema";
  absl::StatusOr<Returns> returns = ReturnsOf(node, schema);
  if (!returns.ok()) return std::string(returns.status().message());
  absl::Status arguments = CheckArguments(node, schema);
  if (!arguments.ok()) return std::string(arguments.message());
  for (const Value* value : node.operands()) {
    if (!value->type().is_tensor()) return absl::StrCat("operand %", value->name(), " is not a tensor");
  }
  return "";
}

absl::StatusOr<FxProgram> EmitFxProgram(const Graph& graph, const FxEmitOptions& options) {
  FxProgram program;
  Names names(options.canonical);
  absl::flat_hash_map<const Value*, std::string> name_of;
  std::string inputs, outputs, body;

  for (const Value* input : graph.inputs()) {
    if (!input->type().is_tensor()) return absl::InvalidArgumentError(absl::StrCat("input %", input->name(), " is not a tensor"));
    std::string name = names.Take(input->name());
    name_of[input] = name;
    absl::StrAppend(&inputs, "    ", Signature(options.canonical ? name : input->name(), input->type().tensor()), ",\n");
    absl::StrAppend(&body, "    ", name, " = g.placeholder(", PythonString(name), ")\n");
  }
  absl::flat_hash_set<const Value*> returned;
  // Outputs that update the input they alias (GraphOutput::aliases): their node runs as its
  // in-place variant on that input's placeholder, and they are not returned.
  absl::flat_hash_set<const Value*> updates;
  for (const GraphOutput& output : graph.outputs()) {
    returned.insert(output.value);
    if (output.aliases == nullptr) continue;
    const Node* producer = output.value->producer();
    if (producer == nullptr || producer->num_results() != 1 || InPlaceOperandOfResult(producer->op(), 0) != 0 ||
        producer->operand(0) != output.aliases || output.aliases->uses().size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph @", graph.name(), ": output ", output.name, " aliases input %", output.aliases->name(),
          ", but it is not made by an op that writes that input in place as its only reader"));
    }
    updates.insert(output.value);
  }

  for (const Node* node : graph.nodes()) {
    std::string why = WhyNotFxExpressible(*node);
    if (!why.empty()) return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": ", node->DebugName(), ": ", why));
    const c10::FunctionSchema& schema = FindSchema(*node)->schema();
    std::vector<std::string> positional, keywords;
    for (size_t i = 0; i < node->args().size(); ++i) {
      const c10::Argument& param = schema.arguments()[i];
      const Attribute& value = node->args()[i].value;
      std::string text;
      if (value.kind() == AttrKind::kOperand) {
        text = name_of.at(node->operand(value.as_operand().index));
      } else if (value.kind() == AttrKind::kOperandList) {
        std::vector<std::string> items;
        for (int index : value.as_operand_list().indices) {
          items.push_back(index == OperandListRef::kNoOperand ? "None" : name_of.at(node->operand(index)));
        }
        text = absl::StrCat("[", absl::StrJoin(items, ", "), "]");
      } else {
        text = *PythonConstant(value, compat::ClassifyArgument(param).kind);  // checked above
      }
      if (param.kwarg_only()) {
        keywords.push_back(absl::StrCat(PythonString(param.name()), ": ", text));
      } else {
        positional.push_back(std::move(text));
      }
    }
    std::string args = absl::StrCat("(", absl::StrJoin(positional, ", "), positional.size() == 1 ? ",)" : ")");
    const bool in_place = node->num_results() == 1 && updates.contains(node->result(0));
    std::string call = absl::StrCat("g.call_function(", PythonOp(*node, in_place), ", ", args,
                                    keywords.empty() ? "" : absl::StrCat(", {", absl::StrJoin(keywords, ", "), "}"),
                                    ")");
    if (!options.canonical) absl::StrAppend(&body, Comment(PrintNode(*node)));
    ++program.num_ops;
    if (*ReturnsOf(*node, schema) == Returns::kOneTensor) {
      std::string name = names.Take(node->result(0)->name());
      name_of[node->result(0)] = name;
      absl::StrAppend(&body, "    ", name, " = ", call, "\n");
      continue;
    }
    std::string tuple = names.Take(absl::StrCat(node->result(0)->name(), "_results"));
    absl::StrAppend(&body, "    ", tuple, " = ", call, "\n");
    for (int i = 0; i < node->num_results(); ++i) {
      const Value* result = node->result(i);
      if (!result->has_uses() && !returned.contains(result)) continue;
      std::string name = names.Take(result->name());
      name_of[result] = name;
      absl::StrAppend(&body, "    ", name, " = g.call_function(operator.getitem, (", tuple, ", ", i, "))\n");
    }
  }
  std::vector<std::string> returned_names;
  for (const GraphOutput& output : graph.outputs()) {
    if (!output.value->type().is_tensor()) return absl::InvalidArgumentError(absl::StrCat("output ", output.name, " is not a tensor"));
    if (updates.contains(output.value)) continue;
    returned_names.push_back(name_of.at(output.value));
    absl::StrAppend(&outputs, "    ", Signature(options.canonical ? returned_names.back() : output.name,
                                                 output.value->type().tensor()),
                    ",\n");
  }
  absl::StrAppend(&body, "    g.output((", absl::StrJoin(returned_names, ", "), returned_names.size() == 1 ? ",))\n" : "))\n");

  std::string title = options.canonical ? std::string("A partition")
                                        : absl::StrCat("Partition @", graph.name(),
                                                       graph.module() != nullptr
                                                           ? absl::StrCat(" of module @", graph.module()->name())
                                                           : "");
  program.source = absl::StrCat(
      "# ", title, ": ", program.num_ops, " torch.ops.aten calls.\n",
      "# Written by Magi's inductor backend (magi/backend/inductor/fx_program.cc, format ", kFxProgramFormat, ").\n",
      "# build() returns the partition as a torch.fx.GraphModule. Its inputs are the partition's\n",
      "# inputs in INPUTS order (parameters too: nothing is baked in); it returns a tuple in\n",
      "# OUTPUTS order. Entries: (name, dtype, sizes, strides, device).\n",
      updates.empty() ? "" : absl::StrCat("# ", updates.size(), " input(s) are written in place (not in OUTPUTS).\n"),
      "import operator\n\nimport torch\n\n",
      "FORMAT = ", kFxProgramFormat, "\n",
      "GRAPH = ", PythonString(options.canonical ? "" : graph.name()), "\n",
      "INPUTS = [\n", inputs, "]\n",
      "OUTPUTS = [\n", outputs, "]\n\n\n",
      "def build():\n",
      "    g = torch.fx.Graph()\n",
      body,
      "    return torch.fx.GraphModule(torch.nn.Module(), g)\n");
  return program;
}

}  // namespace magi::inductor
