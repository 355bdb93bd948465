#include "magi/ir/dot_export.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "magi/base/checked_math.h"
#include "magi/ir/collectives.h"

namespace magi {
namespace {

// Escapes text for a double-quoted DOT string.
std::string DotEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (int64_t{1} << 20)) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (int64_t{1} << 10)) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

}  // namespace

std::string ExportDot(const Graph& graph) {
  std::string out = absl::StrCat("digraph \"", DotEscape(graph.name()), "\" {\n",
                                 "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
  absl::flat_hash_map<const Value*, std::string> source;  // value -> DOT node id
  int next_id = 0;
  for (const Value* input : graph.inputs()) {
    std::string id = absl::StrCat("v", next_id++);
    bool param = input->role() == InputRole::kParam;
    absl::StrAppend(&out, "  ", id, " [shape=ellipse, style=filled, fillcolor=\"", param ? "#c8e6c9" : "#eeeeee",
                    "\", label=\"%", DotEscape(input->name()), "\\n", DotEscape(input->type().ToString()), "\"];\n");
    source[input] = id;
  }
  for (const Node* node : graph.nodes()) {
    std::string id = absl::StrCat("n", next_id++);
    std::string label = node->op();
    if (!node->annotations().module_path.empty()) absl::StrAppend(&label, "\n", node->annotations().module_path);
    std::string style;
    if (IsCollectiveStart(node->op())) {
      int64_t bytes = 0;
      for (const Value* result : node->results()) {
        bytes = SaturatingAdd(bytes, result->type().tensor().SizeInBytes().value_or(0));
      }
      const Attribute* group = node->FindArg("group");
      if (group != nullptr && group->kind() == AttrKind::kString) absl::StrAppend(&label, "\ngroup ", group->as_string());
      absl::StrAppend(&label, "\n", FormatBytes(bytes));
      if (node->annotations().bucket >= 0) absl::StrAppend(&label, "\nbucket ", node->annotations().bucket);
      style = "shape=hexagon, style=filled, fillcolor=\"#ffb74d\", color=\"#e65100\", penwidth=2";
    } else if (node->op() == kWaitOp) {
      style = "shape=box, style=\"dashed,filled\", fillcolor=\"#fff3e0\", color=\"#e65100\"";
    } else {
      if (node->num_results() > 0) absl::StrAppend(&label, "\n", node->result(0)->type().ToString());
      style = "shape=box, style=filled, fillcolor=\"#bbdefb\"";
    }
    absl::StrAppend(&out, "  ", id, " [", style, ", label=\"", DotEscape(label), "\"];\n");
    for (const Value* operand : node->operands()) {
      auto it = source.find(operand);
      if (it == source.end()) continue;  // malformed graph: the verifier reports it
      bool comm_edge = operand->type().is_future();
      absl::StrAppend(&out, "  ", it->second, " -> ", id,
                      comm_edge ? " [color=\"#e65100\", penwidth=2.5]" : "", ";\n");
    }
    for (const Value* result : node->results()) source[result] = id;
  }
  for (const GraphOutput& output : graph.outputs()) {
    std::string id = absl::StrCat("o", next_id++);
    absl::StrAppend(&out, "  ", id, " [shape=plaintext, label=\"", DotEscape(output.name), "\"];\n");
    auto it = source.find(output.value);
    if (it != source.end()) absl::StrAppend(&out, "  ", it->second, " -> ", id, " [style=dotted];\n");
  }
  out += "}\n";
  return out;
}

}  // namespace magi
