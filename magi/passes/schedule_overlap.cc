#include "magi/passes/schedule_overlap.h"

#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/ir/collectives.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/schedule_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

Node* WaitOfStart(const Node& start) {
  for (const Value* result : start.results()) {
    for (Node* user : result->Users()) {
      if (user->op() == kWaitOp) return user;
    }
  }
  return nullptr;
}

// The node right after `node`, or null at the end.
Node* NextNode(const Graph& graph, const Node* node) {
  std::vector<Node*> nodes = graph.nodes();
  for (size_t i = 0; i + 1 < nodes.size(); ++i) {
    if (nodes[i] == node) return nodes[i + 1];
  }
  return nullptr;
}

// Gathered bytes of all-gathers started before `position` and not yet waited for.
int64_t InflightGatherBytes(const Graph& graph, int position) {
  absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
  int64_t bytes = 0;
  for (const auto& [node, index] : positions) {
    if (node->op() != kAllGatherStartOp || index >= position) continue;
    Node* wait = WaitOfStart(*node);
    if (wait != nullptr && positions.at(wait) >= position) bytes += BucketCollectives::BucketBytes(*node);
  }
  return bytes;
}

bool PrefetchGathers(Graph& graph, int prefetch, double max_inflight_bytes) {
  bool changed = false;
  std::vector<Node*> gathers;
  for (Node* node : graph.nodes()) {
    if (node->op() == kAllGatherStartOp && WaitOfStart(*node) != nullptr) gathers.push_back(node);
  }
  for (size_t i = 0; i < gathers.size(); ++i) {
    Node* start = gathers[i];
    for (int distance = prefetch; distance > 0; --distance) {
      Node* target = distance > static_cast<int>(i) ? graph.nodes().front()
                                                    : NextNode(graph, WaitOfStart(*gathers[i - distance]));
      absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
      // Never ahead of the previous gather: the issue order of collectives stays as it was.
      if (i > 0 && target != nullptr && positions.at(target) <= positions.at(gathers[i - 1])) {
        target = NextNode(graph, gathers[i - 1]);
      }
      if (target == nullptr || target == start) break;
      if (positions.at(target) >= positions.at(start)) break;  // already at least this early
      if (max_inflight_bytes > 0 &&
          static_cast<double>(InflightGatherBytes(graph, positions.at(target)) +
                              BucketCollectives::BucketBytes(*start)) > max_inflight_bytes) {
        continue;  // too much in flight there: try a shorter distance
      }
      if (HoistBefore(graph, start, target)) {
        changed = true;
        break;
      }
    }
  }
  return changed;
}

// Sinks every wait to the first use of its results, but not past the next start of the
// same kind on the same process group.
bool SinkWaits(Graph& graph) {
  bool changed = false;
  std::vector<Node*> nodes = graph.nodes();
  for (Node* wait : nodes) {
    if (wait->op() != kWaitOp) continue;
    const Node* start = StartOfWait(*wait);
    if (start == nullptr) continue;
    absl::flat_hash_map<const Node*, int> positions = NodePositions(graph);
    Node* limit = FirstUser(graph, *wait, positions);
    std::string group = StringArg(*start, "group");
    for (Node* node : graph.nodes()) {
      if (positions.at(node) <= positions.at(start) || node->op() != start->op()) continue;
      if (StringArg(*node, "group") != group) continue;
      if (limit == nullptr || positions.at(node) < positions.at(limit)) limit = node;
      break;
    }
    // Only move later: a wait already after its limit stays (it was placed on purpose).
    if (limit == nullptr) {
      if (positions.at(wait) != static_cast<int>(positions.size()) - 1) {
        graph.MoveBefore(wait, nullptr);
        changed = true;
      }
      continue;
    }
    if (positions.at(limit) > positions.at(wait) + 1) {
      graph.MoveBefore(wait, limit);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

absl::StatusOr<bool> ScheduleOverlap::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    if (prefetch_ > 0) changed |= PrefetchGathers(*graph, prefetch_, max_inflight_bytes_);
    changed |= SinkWaits(*graph);
    int64_t position = 0;
    for (Node* node : graph->nodes()) {
      NodeAnnotations& annotations = node->mutable_annotations();
      int stream = 0;
      if (std::optional<CollectiveKind> kind = GetCollectiveKind(node->op())) {
        stream = *kind == CollectiveKind::kAllGather ? 1 : *kind == CollectiveKind::kReduceScatter ? 2 : 3;
      }
      if (IsCollectiveStart(node->op()) && annotations.stream != stream) {
        annotations.stream = stream;
        changed = true;
      }
      if (annotations.schedule != position) {
        annotations.schedule = position;
        changed = true;
      }
      ++position;
    }
  }
  return changed;
}

MAGI_REGISTER(Pass, "schedule-overlap", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
  int prefetch = 1;
  double max_inflight_mb = 0;
  for (const auto& [key, value] : options) {
    if (key == "prefetch") {
      if (!absl::SimpleAtoi(value, &prefetch) || prefetch < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("schedule-overlap: prefetch must be a non-negative integer, not '", value, "'"));
      }
    } else if (key == "max_inflight_mb") {
      if (!absl::SimpleAtod(value, &max_inflight_mb) || max_inflight_mb < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("schedule-overlap: max_inflight_mb must be a non-negative number, not '", value, "'"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule-overlap takes prefetch and max_inflight_mb, not '", key, "'"));
    }
  }
  return std::make_unique<ScheduleOverlap>(prefetch, max_inflight_mb);
});

}  // namespace magi
