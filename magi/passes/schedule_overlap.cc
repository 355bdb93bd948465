#include "magi/passes/schedule_overlap.h"

#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/ir/collectives.h"
#include "magi/base/checked_math.h"
#include "magi/base/numbers.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/schedule_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

// The program order and positions, rebuilt only after a move.
struct Order {
  explicit Order(const Graph& graph) { Refresh(graph); }
  void Refresh(const Graph& graph) {
    nodes = graph.nodes();
    positions.clear();
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) positions[nodes[i]] = i;
  }
  Node* After(const Node* node) const {
    int next = positions.at(node) + 1;
    return next < static_cast<int>(nodes.size()) ? nodes[next] : nullptr;
  }
  std::vector<Node*> nodes;
  absl::flat_hash_map<const Node*, int> positions;
};

bool PrefetchGathers(Graph& graph, int prefetch, double max_inflight_bytes) {
  bool changed = false;
  std::vector<Node*> gathers, waits;
  for (Node* node : graph.nodes()) {
    Node* wait = node->op() == kAllGatherStartOp ? WaitOfStart(*node) : nullptr;
    if (wait == nullptr) continue;
    gathers.push_back(node);
    waits.push_back(wait);
  }
  Order order(graph);
  // Gathered bytes of the gathers started before `position` and not yet waited for.
  auto inflight = [&](int position) {
    int64_t bytes = 0;
    for (size_t j = 0; j < gathers.size(); ++j) {
      if (order.positions.at(gathers[j]) < position && order.positions.at(waits[j]) >= position) {
        bytes = SaturatingAdd(bytes, BucketCollectives::BucketBytes(*gathers[j]));
      }
    }
    return bytes;
  };
  for (size_t i = 0; i < gathers.size(); ++i) {
    Node* start = gathers[i];
    for (int distance = prefetch; distance > 0; --distance) {
      Node* target = distance > static_cast<int>(i) ? order.nodes.front() : order.After(waits[i - distance]);
      // Never ahead of the previous gather: the issue order of collectives stays as it was.
      if (i > 0 && target != nullptr && order.positions.at(target) <= order.positions.at(gathers[i - 1])) {
        target = order.After(gathers[i - 1]);
      }
      if (target == nullptr || target == start) break;
      if (order.positions.at(target) >= order.positions.at(start)) break;  // already at least this early
      if (max_inflight_bytes > 0 &&
          static_cast<double>(SaturatingAdd(inflight(order.positions.at(target)),
                                            BucketCollectives::BucketBytes(*start))) > max_inflight_bytes) {
        continue;  // too much in flight there: try a shorter distance
      }
      if (HoistBefore(graph, start, target)) {
        order.Refresh(graph);
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
  Order order(graph);
  std::vector<Node*> waits;
  for (Node* node : order.nodes) {
    if (node->op() == kWaitOp && StartOfWait(*node) != nullptr) waits.push_back(node);
  }
  for (Node* wait : waits) {
    const Node* start = StartOfWait(*wait);
    Node* limit = FirstUser(graph, *wait, order.positions);
    std::string group = StringArg(*start, "group");
    for (int i = order.positions.at(start) + 1; i < static_cast<int>(order.nodes.size()); ++i) {
      Node* node = order.nodes[i];
      if (node->op() != start->op() || StringArg(*node, "group") != group) continue;
      if (limit == nullptr || i < order.positions.at(limit)) limit = node;
      break;
    }
    // Only move later: a wait already after its limit stays (it was placed on purpose).
    if (limit == nullptr) {
      if (order.positions.at(wait) != static_cast<int>(order.nodes.size()) - 1) {
        graph.MoveBefore(wait, nullptr);
        order.Refresh(graph);
        changed = true;
      }
      continue;
    }
    if (order.positions.at(limit) > order.positions.at(wait) + 1) {
      graph.MoveBefore(wait, limit);
      order.Refresh(graph);
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
        stream = DefaultCollectiveStream(*kind);
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
      if (!ParseFiniteDouble(value, &max_inflight_mb) || max_inflight_mb < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule-overlap: max_inflight_mb must be a non-negative, finite number, not '", value, "'"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule-overlap takes prefetch and max_inflight_mb, not '", key, "'"));
    }
  }
  return std::make_unique<ScheduleOverlap>(prefetch, max_inflight_mb);
});

}  // namespace magi
