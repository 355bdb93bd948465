#include "magi/compiler/partition_map.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/compiler/partitioner.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

std::string Escape(absl::string_view text) {
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

// A light fill colour per distinct partition (identical partitions share it).
const char* Palette(int index) {
  static const char* const kColours[] = {"#c8e6c9", "#bbdefb", "#f8bbd0", "#d1c4e9", "#fff9c4",
                                         "#b2dfdb", "#ffe0b2", "#cfd8dc", "#f0f4c3", "#b3e5fc"};
  return kColours[index % (sizeof(kColours) / sizeof(kColours[0]))];
}

// "layers.0.ffn (fwd)" for a node: where it came from.
std::string Origin(const Node& node) {
  std::string text = node.annotations().module_path.empty() ? "(top)" : node.annotations().module_path;
  if (node.annotations().phase != Phase::kUnset) absl::StrAppend(&text, " ", PhaseName(node.annotations().phase));
  return text;
}

// "aten::mm" -> "mm"; "aten::add.Tensor" -> "add.Tensor".
std::string ShortOp(absl::string_view op) {
  size_t colons = op.find("::");
  return std::string(colons == absl::string_view::npos ? op : op.substr(colons + 2));
}

}  // namespace

std::string PartitionMapDot(const Module& module, const Graph& step, bool compact) {
  std::string out = absl::StrCat("digraph \"", Escape(step.name()), " partitions\" {\n",
                                 "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n",
                                 "  graph [fontname=\"Helvetica\", fontsize=11];\n");
  absl::flat_hash_map<const Value*, std::string> source;  // value of the step -> DOT node id
  std::map<std::string, int> colour_of_key;
  int next_id = 0;
  auto edges_into = [&](const std::string& id, const std::vector<const Value*>& operands) {
    std::vector<std::string> seen;
    for (const Value* operand : operands) {
      auto it = source.find(operand);
      if (it == source.end() || std::find(seen.begin(), seen.end(), it->second) != seen.end()) continue;
      seen.push_back(it->second);
      absl::StrAppend(&out, "  ", it->second, " -> ", id,
                      operand->type().is_future() ? " [color=\"#e65100\", penwidth=2.5]" : "", ";\n");
    }
  };
  for (const Node* node : step.nodes()) {
    const Graph* callee = node->op() == kCallOp ? module.FindGraph(CalleeName(*node)) : nullptr;
    if (callee == nullptr) {
      std::string id = absl::StrCat("n", next_id++);
      std::string label = ShortOp(node->op());
      std::string style = "shape=box, style=filled, fillcolor=\"#eeeeee\"";
      if (IsCollectiveStart(node->op())) {
        style = "shape=hexagon, style=filled, fillcolor=\"#ffb74d\", color=\"#e65100\"";
      } else if (node->op() == kWaitOp) {
        style = "shape=box, style=\"dashed,filled\", fillcolor=\"#fff3e0\", color=\"#e65100\"";
      }
      if (!node->annotations().module_path.empty()) absl::StrAppend(&label, "\n", node->annotations().module_path);
      absl::StrAppend(&out, "  ", id, " [", style, ", label=\"", Escape(label), "\"];\n");
      edges_into(id, std::vector<const Value*>(node->operands().begin(), node->operands().end()));
      for (const Value* result : node->results()) source[result] = id;
      continue;
    }
    // A partition: a cluster.
    std::vector<std::string> parts = absl::StrSplit(callee->name(), '.');
    std::string backend = parts.size() >= 2 ? parts[parts.size() - 2] : "?";
    auto [it, inserted] = colour_of_key.emplace(StructuralKey(*callee), static_cast<int>(colour_of_key.size()));
    const char* colour = Palette(it->second);
    std::vector<Node*> body = callee->nodes();
    std::string title = absl::StrCat("@", callee->name(), "  (", backend, ", ", body.size(), " nodes)");
    if (!body.empty()) {
      std::string first = Origin(*body.front()), last = Origin(*body.back());
      absl::StrAppend(&title, "\n", first, first == last ? "" : absl::StrCat("  ->  ", last));
    }
    std::string cluster = absl::StrCat("cluster_", next_id++);
    absl::StrAppend(&out, "  subgraph ", cluster, " {\n    label=\"", Escape(title),
                    "\";\n    style=\"rounded,filled\";\n    fillcolor=\"", colour, "\";\n    color=\"#455a64\";\n");
    absl::flat_hash_map<const Value*, std::string> inner;  // callee value -> DOT node id
    for (size_t i = 0; i < callee->inputs().size() && i < static_cast<size_t>(node->num_operands()); ++i) {
      auto from = source.find(node->operand(static_cast<int>(i)));
      if (from != source.end()) inner[callee->inputs()[i]] = from->second;
    }
    std::string edges;
    if (compact) {
      std::map<std::string, int> count;
      for (const Node* n : body) ++count[ShortOp(n->op())];
      std::vector<std::pair<int, std::string>> ranked;
      for (const auto& [op, c] : count) ranked.emplace_back(-c, op);
      std::sort(ranked.begin(), ranked.end());
      std::string label;
      for (size_t i = 0; i < ranked.size() && i < 6; ++i) absl::StrAppend(&label, -ranked[i].first, " x ", ranked[i].second, "\\l");
      if (ranked.size() > 6) absl::StrAppend(&label, "... ", ranked.size() - 6, " more ops\\l");
      std::string id = absl::StrCat("n", next_id++);
      absl::StrAppend(&out, "    ", id, " [shape=box, style=filled, fillcolor=white, label=\"", label, "\"];\n");
      std::vector<std::string> seen;
      for (const Value* input : callee->inputs()) {
        auto from = inner.find(input);
        if (from == inner.end() || std::find(seen.begin(), seen.end(), from->second) != seen.end()) continue;
        seen.push_back(from->second);
        absl::StrAppend(&edges, "  ", from->second, " -> ", id, ";\n");
      }
      for (const Node* n : body) {
        for (const Value* result : n->results()) inner[result] = id;
      }
    } else {
      for (const Node* n : body) {
        std::string id = absl::StrCat("n", next_id++);
        absl::StrAppend(&out, "    ", id, " [shape=box, style=filled, fillcolor=white, label=\"",
                        Escape(ShortOp(n->op())), "\", tooltip=\"", Escape(Origin(*n)), "\"];\n");
        std::vector<std::string> seen;
        for (const Value* operand : n->operands()) {
          auto from = inner.find(operand);
          if (from == inner.end() || std::find(seen.begin(), seen.end(), from->second) != seen.end()) continue;
          seen.push_back(from->second);
          absl::StrAppend(&edges, "  ", from->second, " -> ", id, ";\n");
        }
        for (const Value* result : n->results()) inner[result] = id;
      }
    }
    absl::StrAppend(&out, "  }\n", edges);
    for (size_t i = 0; i < callee->outputs().size() && i < static_cast<size_t>(node->num_results()); ++i) {
      auto from = inner.find(callee->outputs()[i].value);
      if (from != inner.end()) source[node->result(static_cast<int>(i))] = from->second;
    }
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace magi
