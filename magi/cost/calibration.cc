#include "magi/cost/calibration.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "magi/analysis/op_traits.h"
#include "magi/base/file.h"
#include "magi/base/numbers.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

constexpr absl::string_view kWorkingBytesField = "working_bytes=";

}  // namespace

std::string CalibrationTable::KeyOf(const Node& node) { return KeyOf(node, Overlapped(node)); }

std::string CalibrationTable::KeyOf(const Node& node, bool overlapped) {
  std::string key = node.op();
  if (node.op() == kCallOp) {
    // A partition call: its time is the callee's, whichever of the identical partitions it
    // calls (their names differ), so the key names the callee's structure.
    const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
    const Graph* callee = module != nullptr ? module->FindGraph(CalleeName(node)) : nullptr;
    absl::StrAppend(&key, "[partition ", callee != nullptr ? StructuralHash(*callee) : "@" + CalleeName(node), "]");
  } else if (IsCollectiveStart(node.op())) {
    // Only the size of the transfer and the group matter, not the tensors' names.
    const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
    const Attribute* group = node.FindArg("group");
    int64_t group_size = 1;
    if (module != nullptr && group != nullptr && group->kind() == AttrKind::kString) {
      if (const ProcessGroup* pg = module->FindProcessGroup(group->as_string())) group_size = pg->size;
    }
    absl::StrAppend(&key, "[world=", group_size, overlapped ? ", overlapped" : "", "]");
  } else {
    for (const Argument& arg : node.args()) {
      AttrKind kind = arg.value.kind();
      if (kind == AttrKind::kOperand || kind == AttrKind::kOperandList) continue;
      absl::StrAppend(&key, ",", arg.name.empty() ? "" : arg.name + "=", arg.value.ToString());
    }
  }
  absl::StrAppend(&key, "(");
  for (int i = 0; i < node.num_operands(); ++i) {
    absl::StrAppend(&key, i ? ", " : "", node.operand(i)->type().ToString());
  }
  absl::StrAppend(&key, ") ->");
  for (const Value* result : node.results()) absl::StrAppend(&key, " ", result->type().ToString());
  return key;
}

absl::Status CalibrationTable::AddRun(const Graph& graph, const std::vector<double>& node_seconds) {
  RunTimeAccumulator run(graph);
  MAGI_RETURN_IF_ERROR(run.Add(node_seconds));
  run.AddTo(*this);
  return absl::OkStatus();
}

bool CalibrationTable::Overlapped(const Node& start) {
  const Graph* graph = start.graph();
  if (graph == nullptr || !IsCollectiveStart(start.op())) return false;
  bool compute = false;
  for (const Node* node = graph->NodeAfter(&start); node != nullptr; node = graph->NodeAfter(node)) {
    if (node->op() == kWaitOp) {
      if (StartOfWait(*node) == &start) return compute;
    } else if (!IsCollectiveStart(node->op()) && !IsViewOp(node->op())) {
      compute = true;  // (a view is metadata: nothing runs beside the collective)
    }
  }
  return false;  // never waited for: nothing to overlap
}

RunTimeAccumulator::RunTimeAccumulator(const Graph& graph) : graph_(&graph), nodes_(graph.nodes().size()) {
  std::vector<Node*> nodes = graph.nodes();
  std::map<const Node*, size_t> start_index;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* node = nodes[i];
    if (IsCollectiveStart(node->op())) {
      start_index[node] = i;
    } else if (node->op() == kWaitOp) {
      const Node* start = StartOfWait(*node);
      auto found = start != nullptr ? start_index.find(start) : start_index.end();
      if (found != start_index.end()) samples_.push_back(Sample{CalibrationTable::KeyOf(*start), {found->second, i}});
    } else {
      samples_.push_back(Sample{CalibrationTable::KeyOf(*node), {i}});
    }
  }
  sums_.assign(samples_.size(), 0.0);
}

absl::Status RunTimeAccumulator::Add(const std::vector<double>& node_seconds) {
  if (node_seconds.size() != nodes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration: ", node_seconds.size(), " times for a graph of ", nodes_, " nodes"));
  }
  for (size_t s = 0; s < samples_.size(); ++s) {
    for (size_t i : samples_[s].nodes) sums_[s] += node_seconds[i];
  }
  ++runs_;
  return absl::OkStatus();
}

void RunTimeAccumulator::AddTo(CalibrationTable& table) const {
  if (runs_ == 0) return;
  for (size_t s = 0; s < samples_.size(); ++s) {
    table.Add(samples_[s].key, sums_[s] / static_cast<double>(runs_), runs_);
  }
}

void CalibrationTable::Add(const std::string& key, double seconds, int64_t count) {
  if (count < 1) return;
  Entry& entry = entries_[key];
  if (entry.count == 0) {
    entry = Entry{seconds, count};  // exactly what was given (a table read back equals the one written)
    return;
  }
  const double total = static_cast<double>(entry.count + count);
  entry.mean_seconds = entry.mean_seconds * (static_cast<double>(entry.count) / total) +
                       seconds * (static_cast<double>(count) / total);
  entry.count += count;
}

void CalibrationTable::Set(const std::string& key, double seconds, int64_t count, int64_t working_bytes) {
  entries_[key] = Entry{seconds, std::max<int64_t>(1, count), std::max<int64_t>(-1, working_bytes)};
}

std::optional<double> CalibrationTable::Find(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.count == 0) return std::nullopt;
  return it->second.mean_seconds;
}

std::optional<int64_t> CalibrationTable::FindWorkingBytes(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.count == 0 || it->second.working_bytes < 0) return std::nullopt;
  return it->second.working_bytes;
}

std::optional<double> CalibrationTable::Lookup(const Node& node) const {
  const bool overlapped = Overlapped(node);
  if (std::optional<double> found = Find(KeyOf(node, overlapped))) return found;
  // A collective measured only in the other context (alone or overlapped): its time beats
  // the formula's.
  if (IsCollectiveStart(node.op())) return Find(KeyOf(node, !overlapped));
  return std::nullopt;
}

std::string CalibrationTable::ToCsv(absl::string_view comment) const {
  std::string out;
  if (!comment.empty()) {
    for (absl::string_view line : absl::StrSplit(comment, '\n')) absl::StrAppend(&out, "# ", line, "\n");
  }
  absl::StrAppend(&out, "# mean_seconds,count,[", kWorkingBytesField, "N,]key\n");
  for (const auto& [key, entry] : entries_) {
    absl::StrAppendFormat(&out, "%.17g,%d,", entry.mean_seconds, entry.count);
    if (entry.working_bytes >= 0) absl::StrAppend(&out, kWorkingBytesField, entry.working_bytes, ",");
    absl::StrAppend(&out, key, "\n");
  }
  return out;
}

absl::StatusOr<CalibrationTable> CalibrationTable::FromCsv(absl::string_view text, absl::string_view source) {
  CalibrationTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(',', 2));
    double seconds = 0;
    int64_t count = 0, working_bytes = -1;
    bool valid = fields.size() == 3 && ParseFiniteDouble(fields[0], &seconds) && absl::SimpleAtoi(fields[1], &count) &&
                 seconds >= 0 && count >= 1;
    absl::string_view key = valid ? fields[2] : absl::string_view();
    if (valid && absl::ConsumePrefix(&key, kWorkingBytesField)) {
      std::pair<absl::string_view, absl::string_view> bytes_and_key = absl::StrSplit(key, absl::MaxSplits(',', 1));
      valid = absl::SimpleAtoi(bytes_and_key.first, &working_bytes) && working_bytes >= 0;
      key = bytes_and_key.second;
    }
    if (!valid || key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ": expected 'mean_seconds,count,key' or 'mean_seconds,count,",
                                                     kWorkingBytesField, "N,key', got '", line, "'"));
    }
    if (working_bytes >= 0) {
      table.Set(std::string(key), seconds, count, working_bytes);
    } else {
      table.Add(std::string(key), seconds, count);
    }
  }
  return table;
}

absl::Status CalibrationTable::Save(const std::string& path, absl::string_view comment) const {
  return WriteFileAtomically(path, ToCsv(comment));
}

absl::StatusOr<CalibrationTable> CalibrationTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return FromCsv(*text, path);
}

}  // namespace magi
