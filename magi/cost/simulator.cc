#include "magi/cost/simulator.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {

int DefaultStream(CollectiveKind kind) { return DefaultCollectiveStream(kind); }

std::string StreamName(int stream) {
  switch (stream) {
    case 0:
      return "compute";
    case 1:
      return "all-gather";
    case 2:
      return "reduce-scatter";
    case 3:
      return "all-reduce";
    default:
      return absl::StrCat("stream ", stream);
  }
}

double NodeTimes::Seconds(const Node& node, const CostModel& model) {
  if (IsCollectiveStart(node.op())) return model.Cost(node).seconds;
  auto [it, inserted] = seconds_.try_emplace(&node, 0.0);
  if (inserted) it->second = model.Cost(node).seconds;
  return it->second;
}

absl::StatusOr<SimulationResult> Simulate(const Graph& graph, const CostModel& model, const SimulateOptions& options) {
  SimulationResult result;
  std::vector<Node*> nodes = graph.nodes();
  // Partition calls hold their inner buffers while they run; other nodes only their results.
  const bool has_calls = std::any_of(nodes.begin(), nodes.end(), [](const Node* node) { return node->op() == kCallOp; });
  absl::StatusOr<MemoryPlan> memory =
      PlanMemory(graph, nodes, /*assign_buffers=*/false, {},
                 has_calls ? WorkingBytesFn([&model](const Node& node) { return model.WorkingBytes(node); }) : nullptr);
  if (!memory.ok()) return memory.status();
  result.peak_bytes = memory->peak_bytes;
  result.peak_node = memory->peak_node;
  const bool all_events = options.events == SimulateOptions::Events::kAll;
  const bool communication_events = options.events != SimulateOptions::Events::kNone;

  double now = 0;  // the compute stream's clock (it also issues collectives)
  absl::flat_hash_map<const Node*, double> finish_of_start;
  std::map<std::string, double> group_free;  // process group -> when its links are free
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    const Node& node = *nodes[i];
    if (node.op() == kWaitOp) {
      const Node* start = StartOfWait(node);
      auto it = start == nullptr ? finish_of_start.end() : finish_of_start.find(start);
      if (it == finish_of_start.end()) {
        return absl::FailedPreconditionError(absl::StrCat(node.DebugName(), " waits before its collective starts"));
      }
      if (it->second > now) {
        result.exposed_communication_seconds += it->second - now;
        if (communication_events) result.events.push_back({"wait", 0, i, now, it->second});
        now = it->second;
      }
      continue;
    }
    const double seconds = options.node_times != nullptr ? options.node_times->Seconds(node, model)
                                                         : model.Cost(node).seconds;
    if (std::optional<CollectiveKind> kind = GetCollectiveKind(node.op())) {
      const Attribute* group = node.FindArg("group");
      std::string group_name = group != nullptr && group->kind() == AttrKind::kString ? group->as_string() : "";
      double begin = std::max(now, group_free[group_name]);
      double end = begin + seconds;
      group_free[group_name] = end;
      finish_of_start[&node] = end;
      int stream = node.annotations().stream > 0 ? node.annotations().stream : DefaultStream(*kind);
      if (communication_events) {
        result.events.push_back({absl::StrFormat("%s [%d tensors, %.2f MB]", SplitOpName(node.op()).name,
                                                 node.num_results(), model.Cost(node).bytes / 1e6),
                                 stream, i, begin, end});
      }
      result.communication_seconds += seconds;
      ++result.num_collectives;
      continue;
    }
    if (all_events) result.events.push_back({node.op(), 0, i, now, now + seconds});
    now += seconds;
    result.compute_seconds += seconds;
  }
  result.step_seconds = now;
  for (const auto& [start, finish] : finish_of_start) result.step_seconds = std::max(result.step_seconds, finish);
  return result;
}

std::string ChromeTraceJson(const SimulationResult& result, const std::string& process_name) {
  auto escape = [](absl::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out.push_back('\\');
      if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
    }
    return out;
  };
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  absl::StrAppend(&out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"",
                  escape(process_name), "\"}}");
  std::map<int, bool> streams = {{0, true}};
  for (const SimulatedEvent& event : result.events) streams[event.stream] = true;
  for (const auto& [stream, unused] : streams) {
    absl::StrAppendFormat(&out,
                          ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
                          "\"%s\"}}",
                          stream, StreamName(stream));
  }
  for (const SimulatedEvent& event : result.events) {
    absl::StrAppendFormat(
        &out,
        ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
        "\"dur\": %.3f, \"args\": {\"node\": %d}}",
        escape(event.name), event.stream == 0 ? "compute" : "communication", event.stream, event.start_s * 1e6,
        (event.end_s - event.start_s) * 1e6, event.node_index);
  }
  absl::StrAppend(&out, "\n]}\n");
  return out;
}

}  // namespace magi
