#include "magi/ir/printer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace magi {
namespace {

bool IsBareNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

std::string ValueRef(const Value* value) { return absl::StrCat("%", FormatName(value->name())); }

std::string FormatArgument(const Node& node, const Argument& arg) {
  std::string text = arg.name.empty() ? "" : absl::StrCat(arg.name, " = ");
  const Attribute& value = arg.value;
  if (value.kind() == AttrKind::kOperand) {
    absl::StrAppend(&text, ValueRef(node.operand(value.as_operand().index)));
  } else if (value.kind() == AttrKind::kOperandList) {
    absl::StrAppend(&text, "[",
                    absl::StrJoin(value.as_operand_list().indices, ", ",
                                  [&](std::string* out, int index) {
                                    out->append(index == OperandListRef::kNoOperand ? "none"
                                                                                    : ValueRef(node.operand(index)));
                                  }),
                    "]");
  } else {
    absl::StrAppend(&text, value.ToString());
  }
  return text;
}

std::string FormatAnnotations(const NodeAnnotations& a) {
  std::vector<std::string> parts;
  if (!a.module_path.empty()) parts.push_back(absl::StrCat("module = ", QuoteString(a.module_path)));
  if (a.stream >= 0) parts.push_back(absl::StrCat("stream = ", a.stream));
  if (a.schedule >= 0) parts.push_back(absl::StrCat("sched = ", a.schedule));
  if (a.remat != RematDecision::kUnset) parts.push_back(absl::StrCat("remat = ", RematDecisionName(a.remat)));
  if (a.bucket >= 0) parts.push_back(absl::StrCat("bucket = ", a.bucket));
  if (a.phase != Phase::kUnset) parts.push_back(absl::StrCat("phase = ", PhaseName(a.phase)));
  if (parts.empty()) return "";
  return absl::StrCat(" {", absl::StrJoin(parts, ", "), "}");
}

void AppendGraph(const Graph& graph, std::string* out) {
  absl::StrAppend(out, "  graph @", FormatName(graph.name()), " {\n");
  for (const Value* input : graph.inputs()) {
    absl::StrAppend(out, "    input ", ValueRef(input), ": ", input->type().ToString());
    if (input->role() != InputRole::kData) absl::StrAppend(out, " {role = ", InputRoleName(input->role()), "}");
    out->append("\n");
  }
  for (const Node* node : graph.nodes()) absl::StrAppend(out, "    ", PrintNode(*node), "\n");
  for (const GraphOutput& output : graph.outputs()) {
    absl::StrAppend(out, "    output ", FormatName(output.name), " = ", ValueRef(output.value));
    if (output.aliases != nullptr) absl::StrAppend(out, " {aliases = ", ValueRef(output.aliases), "}");
    out->append("\n");
  }
  out->append("  }\n");
}

}  // namespace

std::string FormatName(absl::string_view name) {
  bool bare = !name.empty();
  for (char c : name) bare = bare && IsBareNameChar(c);
  return bare ? std::string(name) : QuoteString(name);
}

std::string PrintNode(const Node& node) {
  std::string text;
  if (node.num_results() > 0) {
    absl::StrAppend(&text,
                    absl::StrJoin(node.results(), ", ", [](std::string* out, const Value* v) {
                      out->append(ValueRef(v));
                    }),
                    " = ");
  }
  absl::StrAppend(&text, node.op(), "(",
                  absl::StrJoin(node.args(), ", ",
                                [&](std::string* out, const Argument& arg) { out->append(FormatArgument(node, arg)); }),
                  ")");
  if (node.num_results() > 0) {
    absl::StrAppend(&text, " : ", absl::StrJoin(node.results(), ", ", [](std::string* out, const Value* v) {
                      out->append(v->type().ToString());
                    }));
  }
  absl::StrAppend(&text, FormatAnnotations(node.annotations()));
  return text;
}

std::string PrintGraph(const Graph& graph) {
  std::string out;
  AppendGraph(graph, &out);
  return out;
}

std::string PrintModule(const Module& module) {
  std::string out = absl::StrCat("module @", FormatName(module.name()), " {\n");
  for (const auto& group : module.process_groups()) {
    absl::StrAppend(&out, "  process_group @", FormatName(group->name), " {axis = ", QuoteString(group->axis),
                    ", size = ", group->size);
    if (!group->ranks.empty()) absl::StrAppend(&out, ", ranks = [", absl::StrJoin(group->ranks, ", "), "]");
    out.append("}\n");
  }
  for (const Graph* graph : module.graphs()) AppendGraph(*graph, &out);
  out.append("}\n");
  return out;
}

}  // namespace magi
