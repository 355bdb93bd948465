#include "magi/ir/parser.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/ir/lexer.h"

namespace magi {
namespace {

using ir_text::Lexer;
using ir_text::Token;
using ir_text::TokenKind;

// An argument as written, before operand values are attached to a node.
struct ParsedArg {
  std::string name;
  // Exactly one of these is used: a constant, one value, or a value list (null = none).
  Attribute constant;
  Value* value = nullptr;
  std::vector<Value*> values;
  enum class Form { kConstant, kValue, kValueList } form = Form::kConstant;
};

class Parser {
 public:
  Parser(absl::string_view text, absl::string_view filename)
      : lexer_(text), filename_(filename.empty() ? "<text>" : filename) {
    token_ = lexer_.Next();
  }

  absl::StatusOr<std::unique_ptr<Module>> ParseModule();

 private:
  // --- token helpers
  const Token& Peek() const { return token_; }
  Token Take() {
    Token t = std::move(token_);
    token_ = lexer_.Next();
    return t;
  }
  bool At(TokenKind kind) const { return token_.kind == kind; }
  bool AtKeyword(absl::string_view word) const { return At(TokenKind::kIdentifier) && token_.text == word; }
  absl::Status ErrorAt(const SourceLocation& loc, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(filename_, ":", loc.line, ":", loc.column, ": ", message));
  }
  absl::Status Unexpected(absl::string_view expected) const {
    if (At(TokenKind::kError)) return ErrorAt(token_.location, token_.text);
    std::string found(ir_text::TokenKindName(token_.kind));
    if (At(TokenKind::kIdentifier)) found = absl::StrCat("'", token_.text, "'");
    if (At(TokenKind::kValueName)) found = absl::StrCat("%", token_.text);
    if (At(TokenKind::kSymbolName)) found = absl::StrCat("@", token_.text);
    return ErrorAt(token_.location, absl::StrCat("expected ", expected, ", found ", found));
  }
  absl::StatusOr<Token> Expect(TokenKind kind, absl::string_view what = "") {
    if (!At(kind)) return Unexpected(what.empty() ? ir_text::TokenKindName(kind) : what);
    return Take();
  }
  absl::Status ExpectKeyword(absl::string_view word) {
    if (!AtKeyword(word)) return Unexpected(absl::StrCat("'", word, "'"));
    Take();
    return absl::OkStatus();
  }
  // A name written bare (identifier) or quoted (string), e.g. output names.
  absl::StatusOr<std::string> ParsePlainName(absl::string_view what) {
    if (At(TokenKind::kIdentifier) || At(TokenKind::kString)) return Take().text;
    if (At(TokenKind::kInteger)) return Take().text;
    return Unexpected(what);
  }

  // --- grammar
  absl::Status ParseProcessGroup(Module& module);
  absl::Status ParseGraph(Module& module);
  absl::Status ParseInput(Graph& graph);
  absl::Status ParseOutput(Graph& graph);
  absl::Status ParseNode(Graph& graph);
  // `value` names the value being typed ("%x"), for errors.
  absl::StatusOr<TensorType> ParseTensorType(absl::string_view value);
  absl::StatusOr<Type> ParseType(absl::string_view value);
  absl::StatusOr<std::vector<int64_t>> ParseDims(bool allow_dynamic);
  absl::StatusOr<ParsedArg> ParseArgValue(Graph& graph);
  absl::StatusOr<ParsedArg> ParseList(Graph& graph);
  // A constant spelled with an identifier, already taken: none, true, false, inf, nan,
  // dtype(bf16), device(cuda:0).
  absl::StatusOr<Attribute> ParseIdentifierConstant(const Token& ident);
  absl::Status ParseAnnotations(NodeAnnotations& annotations);
  absl::StatusOr<Value*> ResolveValue(Graph& graph, const Token& token);
  absl::StatusOr<int64_t> ParseInt(absl::string_view what);

  Lexer lexer_;
  std::string filename_;
  Token token_;
};

absl::StatusOr<std::unique_ptr<Module>> Parser::ParseModule() {
  MAGI_RETURN_IF_ERROR(ExpectKeyword("module"));
  MAGI_ASSIGN_OR_RETURN(Token name, Expect(TokenKind::kSymbolName, "module name (@name)"));
  auto module = std::make_unique<Module>(name.text);
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLBrace).status());
  while (!At(TokenKind::kRBrace)) {
    if (AtKeyword("process_group")) {
      MAGI_RETURN_IF_ERROR(ParseProcessGroup(*module));
    } else if (AtKeyword("graph")) {
      MAGI_RETURN_IF_ERROR(ParseGraph(*module));
    } else {
      return Unexpected("'process_group', 'graph' or '}'");
    }
  }
  Take();
  if (!At(TokenKind::kEnd)) return Unexpected("end of input after the module");
  return module;
}

absl::StatusOr<int64_t> Parser::ParseInt(absl::string_view what) {
  MAGI_ASSIGN_OR_RETURN(Token t, Expect(TokenKind::kInteger, what));
  return t.int_value;
}

absl::Status Parser::ParseProcessGroup(Module& module) {
  Take();  // process_group
  MAGI_ASSIGN_OR_RETURN(Token name, Expect(TokenKind::kSymbolName, "process group name (@name)"));
  if (module.FindProcessGroup(name.text) != nullptr) {
    return ErrorAt(name.location, absl::StrCat("process group @", name.text, " is defined twice"));
  }
  ProcessGroup group;
  group.name = name.text;
  bool has_size = false;
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLBrace).status());
  while (!At(TokenKind::kRBrace)) {
    MAGI_ASSIGN_OR_RETURN(Token key, Expect(TokenKind::kIdentifier, "'axis', 'size' or 'ranks'"));
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
    if (key.text == "axis") {
      MAGI_ASSIGN_OR_RETURN(Token axis, Expect(TokenKind::kString, "axis name string"));
      group.axis = axis.text;
    } else if (key.text == "size") {
      SourceLocation loc = Peek().location;
      MAGI_ASSIGN_OR_RETURN(group.size, ParseInt("group size"));
      if (group.size < 1) return ErrorAt(loc, absl::StrCat("group size must be >= 1, got ", group.size));
      has_size = true;
    } else if (key.text == "ranks") {
      MAGI_ASSIGN_OR_RETURN(group.ranks, ParseDims(/*allow_dynamic=*/false));
    } else {
      return ErrorAt(key.location, absl::StrCat("unknown process group field '", key.text, "'"));
    }
    if (!At(TokenKind::kRBrace)) MAGI_RETURN_IF_ERROR(Expect(TokenKind::kComma, "',' or '}'").status());
  }
  Take();
  if (!has_size) return ErrorAt(name.location, absl::StrCat("process group @", name.text, " has no size"));
  if (!group.ranks.empty() && static_cast<int64_t>(group.ranks.size()) != group.size) {
    return ErrorAt(name.location, absl::StrCat("process group @", name.text, " lists ", group.ranks.size(),
                                               " ranks but has size ", group.size));
  }
  module.AddProcessGroup(std::move(group));
  return absl::OkStatus();
}

absl::Status Parser::ParseGraph(Module& module) {
  Take();  // graph
  MAGI_ASSIGN_OR_RETURN(Token name, Expect(TokenKind::kSymbolName, "graph name (@name)"));
  if (module.FindGraph(name.text) != nullptr) {
    return ErrorAt(name.location, absl::StrCat("graph @", name.text, " is defined twice"));
  }
  Graph* graph = module.AddGraph(name.text);
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLBrace).status());
  while (!At(TokenKind::kRBrace)) {
    if (AtKeyword("input")) {
      MAGI_RETURN_IF_ERROR(ParseInput(*graph));
    } else if (AtKeyword("output")) {
      MAGI_RETURN_IF_ERROR(ParseOutput(*graph));
    } else {
      MAGI_RETURN_IF_ERROR(ParseNode(*graph));
    }
  }
  Take();
  return absl::OkStatus();
}

absl::Status Parser::ParseInput(Graph& graph) {
  Token keyword = Take();
  if (graph.num_nodes() > 0) return ErrorAt(keyword.location, "inputs must come before the first node");
  MAGI_ASSIGN_OR_RETURN(Token name, Expect(TokenKind::kValueName, "input name (%name)"));
  if (graph.FindValue(name.text) != nullptr) {
    return ErrorAt(name.location, absl::StrCat("value %", name.text, " is defined twice"));
  }
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kColon).status());
  MAGI_ASSIGN_OR_RETURN(Type type, ParseType(absl::StrCat("input %", name.text)));
  InputRole role = InputRole::kData;
  if (At(TokenKind::kLBrace)) {
    Take();
    MAGI_RETURN_IF_ERROR(ExpectKeyword("role"));
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
    MAGI_ASSIGN_OR_RETURN(Token role_name, Expect(TokenKind::kIdentifier, "input role"));
    std::optional<InputRole> parsed = ParseInputRole(role_name.text);
    if (!parsed) {
      return ErrorAt(role_name.location, absl::StrCat("unknown input role '", role_name.text,
                                                      "' (expected data, param, buffer, opt_state or rng)"));
    }
    role = *parsed;
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kRBrace).status());
  }
  graph.AddInput(name.text, std::move(type), role);
  return absl::OkStatus();
}

absl::Status Parser::ParseOutput(Graph& graph) {
  Take();  // output
  SourceLocation loc = Peek().location;
  MAGI_ASSIGN_OR_RETURN(std::string name, ParsePlainName("output name"));
  for (const GraphOutput& output : graph.outputs()) {
    if (output.name == name) return ErrorAt(loc, absl::StrCat("output '", name, "' is defined twice"));
  }
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
  MAGI_ASSIGN_OR_RETURN(Token value_token, Expect(TokenKind::kValueName, "output value (%name)"));
  MAGI_ASSIGN_OR_RETURN(Value * value, ResolveValue(graph, value_token));
  Value* aliases = nullptr;
  if (At(TokenKind::kLBrace)) {  // {aliases = %input}: a donated input
    Take();
    MAGI_RETURN_IF_ERROR(ExpectKeyword("aliases"));
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
    MAGI_ASSIGN_OR_RETURN(Token alias_token, Expect(TokenKind::kValueName, "donated input (%name)"));
    MAGI_ASSIGN_OR_RETURN(aliases, ResolveValue(graph, alias_token));
    if (!aliases->is_graph_input()) {
      return ErrorAt(alias_token.location,
                     absl::StrCat("output '", name, "' aliases %", alias_token.text, ", which is not a graph input"));
    }
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kRBrace).status());
  }
  graph.AddOutput(std::move(name), value, aliases);
  return absl::OkStatus();
}

absl::StatusOr<Value*> Parser::ResolveValue(Graph& graph, const Token& token) {
  Value* value = graph.FindValue(token.text);
  if (value == nullptr) {
    return ErrorAt(token.location, absl::StrCat("use of undefined value %", token.text));
  }
  return value;
}

absl::Status Parser::ParseNode(Graph& graph) {
  SourceLocation start = Peek().location;
  std::vector<Token> result_names;
  if (At(TokenKind::kValueName)) {
    while (true) {
      MAGI_ASSIGN_OR_RETURN(Token name, Expect(TokenKind::kValueName, "result name (%name)"));
      for (const Token& earlier : result_names) {
        if (earlier.text == name.text) {
          return ErrorAt(name.location, absl::StrCat("value %", name.text, " is defined twice"));
        }
      }
      if (graph.FindValue(name.text) != nullptr) {
        return ErrorAt(name.location, absl::StrCat("value %", name.text, " is defined twice"));
      }
      result_names.push_back(std::move(name));
      if (!At(TokenKind::kComma)) break;
      Take();
    }
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
  }
  if (!At(TokenKind::kIdentifier)) {
    return Unexpected(result_names.empty() ? "'input', 'output', a node or '}'" : "op name");
  }
  Token op = Take();
  if (op.text.find("::") == std::string::npos) {
    return ErrorAt(op.location, absl::StrCat("op name '", op.text, "' has no namespace (expected e.g. aten::mm)"));
  }
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLParen).status());
  std::vector<ParsedArg> parsed_args;
  while (!At(TokenKind::kRParen)) {
    std::string arg_name;
    ParsedArg arg;
    if (At(TokenKind::kIdentifier)) {
      // A keyword argument (name = value) or a bare constant (none, true, dtype(bf16), ...).
      // Names such as `dtype` are also constants' spellings, hence the look at the next token.
      Token ident = Take();
      if (At(TokenKind::kEqual)) {
        Take();
        arg_name = std::move(ident.text);
        MAGI_ASSIGN_OR_RETURN(arg, ParseArgValue(graph));
      } else {
        MAGI_ASSIGN_OR_RETURN(arg.constant, ParseIdentifierConstant(ident));
      }
    } else {
      MAGI_ASSIGN_OR_RETURN(arg, ParseArgValue(graph));
    }
    arg.name = std::move(arg_name);
    parsed_args.push_back(std::move(arg));
    if (!At(TokenKind::kRParen)) MAGI_RETURN_IF_ERROR(Expect(TokenKind::kComma, "',' or ')'").status());
  }
  Take();  // ')'

  std::vector<Type> types;
  if (!result_names.empty()) {
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kColon, "':' and the result types").status());
    while (true) {
      std::string value =
          types.size() < result_names.size() ? absl::StrCat("%", result_names[types.size()].text) : "a result";
      MAGI_ASSIGN_OR_RETURN(Type type, ParseType(value));
      types.push_back(std::move(type));
      if (!At(TokenKind::kComma)) break;
      Take();
    }
    if (types.size() != result_names.size()) {
      return ErrorAt(start, absl::StrCat(op.text, " names ", result_names.size(), " results but gives ",
                                         types.size(), " types"));
    }
  }
  NodeAnnotations annotations;
  if (At(TokenKind::kLBrace)) MAGI_RETURN_IF_ERROR(ParseAnnotations(annotations));

  std::vector<NodeArg> args;
  for (ParsedArg& parsed : parsed_args) {
    switch (parsed.form) {
      case ParsedArg::Form::kConstant:
        args.emplace_back(std::move(parsed.constant), std::move(parsed.name));
        break;
      case ParsedArg::Form::kValue:
        args.emplace_back(parsed.value, std::move(parsed.name));
        break;
      case ParsedArg::Form::kValueList:
        args.emplace_back(std::move(parsed.values), std::move(parsed.name));
        break;
    }
  }
  std::vector<std::string> names;
  for (Token& t : result_names) names.push_back(std::move(t.text));
  Node* node = graph.AddNode(op.text, std::move(args), std::move(types), nullptr, std::move(names));
  node->set_location(op.location);
  node->mutable_annotations() = std::move(annotations);
  return absl::OkStatus();
}

absl::StatusOr<ParsedArg> Parser::ParseArgValue(Graph& graph) {
  ParsedArg arg;
  switch (Peek().kind) {
    case TokenKind::kValueName: {
      Token t = Take();
      MAGI_ASSIGN_OR_RETURN(arg.value, ResolveValue(graph, t));
      arg.form = ParsedArg::Form::kValue;
      return arg;
    }
    case TokenKind::kInteger:
      arg.constant = Take().int_value;
      return arg;
    case TokenKind::kFloat:
      arg.constant = Take().float_value;
      return arg;
    case TokenKind::kString:
      arg.constant = Take().text;
      return arg;
    case TokenKind::kLBracket:
      return ParseList(graph);
    case TokenKind::kIdentifier: {
      Token ident = Take();
      MAGI_ASSIGN_OR_RETURN(arg.constant, ParseIdentifierConstant(ident));
      return arg;
    }
    default:
      return Unexpected("an argument value");
  }
}

absl::StatusOr<Attribute> Parser::ParseIdentifierConstant(const Token& ident) {
  if (ident.text == "none") return Attribute(NoneAttr{});
  if (ident.text == "true") return Attribute(true);
  if (ident.text == "false") return Attribute(false);
  if (ident.text == "inf") return Attribute(HUGE_VAL);
  if (ident.text == "nan") return Attribute(std::nan(""));
  if (ident.text != "dtype" && ident.text != "device") {
    return ErrorAt(ident.location, absl::StrCat("unexpected '", ident.text, "' as an argument"));
  }
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLParen).status());
  MAGI_ASSIGN_OR_RETURN(Token word, Expect(TokenKind::kIdentifier, ident.text == "dtype" ? "a dtype" : "a device"));
  std::string spelled = word.text;
  if (ident.text == "device" && At(TokenKind::kColon)) {
    Take();
    MAGI_ASSIGN_OR_RETURN(Token index, Expect(TokenKind::kInteger, "device index"));
    absl::StrAppend(&spelled, ":", index.text);
  }
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kRParen).status());
  if (ident.text == "dtype") {
    std::optional<DType> dtype = ParseDType(spelled);
    if (!dtype) return ErrorAt(word.location, absl::StrCat("unknown dtype '", spelled, "'"));
    return Attribute(*dtype);
  }
  absl::StatusOr<Device> device = Device::Parse(spelled);
  if (!device.ok()) return ErrorAt(word.location, device.status().message());
  return Attribute(*device);
}

absl::StatusOr<ParsedArg> Parser::ParseList(Graph& graph) {
  SourceLocation start = Take().location;  // '['
  // Elements are collected as tokens first, then the list's kind is decided.
  std::vector<Token> items;
  while (!At(TokenKind::kRBracket)) {
    if (!(At(TokenKind::kValueName) || At(TokenKind::kInteger) || At(TokenKind::kFloat) ||
          AtKeyword("none") || AtKeyword("true") || AtKeyword("false") || AtKeyword("inf") ||
          AtKeyword("nan"))) {
      return Unexpected("a list element");
    }
    items.push_back(Take());
    if (!At(TokenKind::kRBracket)) MAGI_RETURN_IF_ERROR(Expect(TokenKind::kComma, "',' or ']'").status());
  }
  Take();  // ']'
  bool any_value = false, any_none = false, any_float = false, any_int = false, any_bool = false;
  for (const Token& t : items) {
    any_value |= t.kind == TokenKind::kValueName;
    any_none |= t.kind == TokenKind::kIdentifier && t.text == "none";
    any_float |= t.kind == TokenKind::kFloat || (t.kind == TokenKind::kIdentifier && (t.text == "inf" || t.text == "nan"));
    any_int |= t.kind == TokenKind::kInteger;
    any_bool |= t.kind == TokenKind::kIdentifier && (t.text == "true" || t.text == "false");
  }
  ParsedArg arg;
  if (any_value || any_none) {
    if (any_float || any_int || any_bool) {
      return ErrorAt(start, "a list mixes values (%x / none) with constants");
    }
    arg.form = ParsedArg::Form::kValueList;
    for (const Token& t : items) {
      if (t.kind == TokenKind::kValueName) {
        MAGI_ASSIGN_OR_RETURN(Value * value, ResolveValue(graph, t));
        arg.values.push_back(value);
      } else {
        arg.values.push_back(nullptr);
      }
    }
    return arg;
  }
  if (any_bool) {
    if (any_float || any_int) return ErrorAt(start, "a list mixes booleans with numbers");
    std::vector<bool> bools;
    for (const Token& t : items) bools.push_back(t.text == "true");
    arg.constant = std::move(bools);
    return arg;
  }
  if (any_float) {
    std::vector<double> floats;
    for (const Token& t : items) {
      if (t.kind == TokenKind::kInteger) {
        floats.push_back(static_cast<double>(t.int_value));
      } else if (t.kind == TokenKind::kFloat) {
        floats.push_back(t.float_value);
      } else {
        floats.push_back(t.text == "inf" ? HUGE_VAL : std::nan(""));
      }
    }
    arg.constant = std::move(floats);
    return arg;
  }
  std::vector<int64_t> ints;  // also the empty list
  for (const Token& t : items) ints.push_back(t.int_value);
  arg.constant = std::move(ints);
  return arg;
}

absl::StatusOr<std::vector<int64_t>> Parser::ParseDims(bool allow_dynamic) {
  MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLBracket).status());
  std::vector<int64_t> dims;
  while (!At(TokenKind::kRBracket)) {
    if (allow_dynamic && At(TokenKind::kQuestion)) {
      Take();
      dims.push_back(kDynamicDim);
    } else {
      SourceLocation loc = Peek().location;
      MAGI_ASSIGN_OR_RETURN(int64_t dim, ParseInt(allow_dynamic ? "a size or '?'" : "an integer"));
      if (dim < 0) return ErrorAt(loc, absl::StrCat("negative value ", dim));
      dims.push_back(dim);
    }
    if (!At(TokenKind::kRBracket)) MAGI_RETURN_IF_ERROR(Expect(TokenKind::kComma, "',' or ']'").status());
  }
  Take();
  return dims;
}

absl::StatusOr<TensorType> Parser::ParseTensorType(absl::string_view value) {
  MAGI_ASSIGN_OR_RETURN(Token dtype_token, Expect(TokenKind::kIdentifier, "a type such as f32[8,16]"));
  std::optional<DType> dtype = ParseDType(dtype_token.text);
  if (!dtype) return ErrorAt(dtype_token.location, absl::StrCat("unknown dtype '", dtype_token.text, "'"));
  TensorType type;
  type.dtype = *dtype;
  MAGI_ASSIGN_OR_RETURN(type.sizes, ParseDims(/*allow_dynamic=*/true));
  // Every size the IR holds has an element and byte count that fits int64.
  if (absl::StatusOr<int64_t> bytes = type.CheckedSizeInBytes();
      !bytes.ok() && bytes.status().code() == absl::StatusCode::kOutOfRange) {
    return ErrorAt(dtype_token.location, absl::StrCat(value, ": ", bytes.status().message()));
  }
  if (AtKeyword("strides")) {
    SourceLocation loc = Take().location;
    MAGI_ASSIGN_OR_RETURN(type.strides, ParseDims(/*allow_dynamic=*/false));
    if (type.strides.size() != type.sizes.size()) {
      return ErrorAt(loc, absl::StrCat(type.strides.size(), " strides for ", type.sizes.size(), " dimensions"));
    }
  }
  if (At(TokenKind::kSymbolName)) {
    Token device_token = Take();
    std::string spelled = device_token.text;
    if (At(TokenKind::kColon)) {
      Take();
      MAGI_ASSIGN_OR_RETURN(Token index, Expect(TokenKind::kInteger, "device index"));
      absl::StrAppend(&spelled, ":", index.text);
    }
    absl::StatusOr<Device> device = Device::Parse(spelled);
    if (!device.ok()) return ErrorAt(device_token.location, device.status().message());
    type.device = *device;
  }
  return type;
}

absl::StatusOr<Type> Parser::ParseType(absl::string_view value) {
  if (AtKeyword("future")) {
    Take();
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kLAngle).status());
    MAGI_ASSIGN_OR_RETURN(TensorType tensor, ParseTensorType(value));
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kRAngle).status());
    return Type::Future(std::move(tensor));
  }
  MAGI_ASSIGN_OR_RETURN(TensorType tensor, ParseTensorType(value));
  return Type::Tensor(std::move(tensor));
}

absl::Status Parser::ParseAnnotations(NodeAnnotations& annotations) {
  Take();  // '{'
  while (!At(TokenKind::kRBrace)) {
    MAGI_ASSIGN_OR_RETURN(Token key, Expect(TokenKind::kIdentifier, "an annotation name"));
    MAGI_RETURN_IF_ERROR(Expect(TokenKind::kEqual).status());
    if (key.text == "module") {
      MAGI_ASSIGN_OR_RETURN(Token path, Expect(TokenKind::kString, "module path string"));
      annotations.module_path = path.text;
    } else if (key.text == "stream" || key.text == "sched" || key.text == "bucket") {
      SourceLocation loc = Peek().location;
      MAGI_ASSIGN_OR_RETURN(int64_t number, ParseInt(key.text));
      if (number < 0) return ErrorAt(loc, absl::StrCat(key.text, " must be >= 0"));
      if (key.text == "stream") {
        if (number > (1 << 20)) return ErrorAt(loc, "stream index too large");
        annotations.stream = static_cast<int>(number);
      } else if (key.text == "sched") {
        annotations.schedule = number;
      } else {
        annotations.bucket = number;
      }
    } else if (key.text == "phase") {
      MAGI_ASSIGN_OR_RETURN(Token phase, Expect(TokenKind::kIdentifier, "fwd, bwd or opt"));
      std::optional<Phase> parsed = ParsePhase(phase.text);
      if (!parsed) {
        return ErrorAt(phase.location, absl::StrCat("unknown phase '", phase.text, "' (expected fwd, bwd or opt)"));
      }
      annotations.phase = *parsed;
    } else if (key.text == "remat") {
      MAGI_ASSIGN_OR_RETURN(Token decision, Expect(TokenKind::kIdentifier, "save or recompute"));
      if (decision.text == "save") {
        annotations.remat = RematDecision::kSave;
      } else if (decision.text == "recompute") {
        annotations.remat = RematDecision::kRecompute;
      } else {
        return ErrorAt(decision.location, absl::StrCat("unknown remat decision '", decision.text, "'"));
      }
    } else {
      return ErrorAt(key.location, absl::StrCat("unknown annotation '", key.text,
                                                "' (expected module, stream, sched, remat, bucket or phase)"));
    }
    if (!At(TokenKind::kRBrace)) MAGI_RETURN_IF_ERROR(Expect(TokenKind::kComma, "',' or '}'").status());
  }
  Take();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> ParseModule(absl::string_view text, absl::string_view filename) {
  Parser parser(text, filename);
  return parser.ParseModule();
}

}  // namespace magi
