#include "magi/passes/schedule_overlap.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "magi/base/checked_math.h"
#include "magi/base/numbers.h"
#include "magi/ir/collectives.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/program_order.h"
#include "magi/passes/schedule_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

constexpr int kMaxPrefetch = 64;

}  // namespace

std::string GatherKey(const Node& start) {
  const std::string& path = start.annotations().module_path;
  return absl::StrCat(path.empty() ? "root" : path, start.annotations().phase == Phase::kBackward ? ".bwd" : ".fwd");
}

int ScheduleOverlap::DistanceOf(const Node& start) const {
  if (!per_gather_.empty()) {
    auto it = per_gather_.find(GatherKey(start));
    if (it != per_gather_.end()) return it->second;
  }
  return prefetch_;
}

bool ScheduleOverlap::PrefetchGathers(ProgramOrder& order) const {
  bool changed = false;
  std::vector<Node*> gathers, waits;
  std::vector<int64_t> bytes;
  for (Node* node : order.nodes()) {
    Node* wait = node->op() == kAllGatherStartOp ? WaitOfStart(*node) : nullptr;
    if (wait == nullptr) continue;
    gathers.push_back(node);
    waits.push_back(wait);
    bytes.push_back(BucketCollectives::BucketBytes(*node));
  }
  // Gathered bytes of the gathers started before `position` and not yet waited for.
  auto inflight = [&](int position) {
    int64_t total = 0;
    for (size_t j = 0; j < gathers.size(); ++j) {
      if (order.Position(gathers[j]) < position && order.Position(waits[j]) >= position) {
        total = SaturatingAdd(total, bytes[j]);
      }
    }
    return total;
  };
  for (size_t i = 0; i < gathers.size(); ++i) {
    Node* start = gathers[i];
    for (int distance = DistanceOf(*start); distance > 0; --distance) {
      Node* target = distance > static_cast<int>(i) ? order.at(0) : order.After(waits[i - distance]);
      // Never ahead of the previous gather: the issue order of collectives stays as it was.
      if (i > 0 && target != nullptr && order.Position(target) <= order.Position(gathers[i - 1])) {
        target = order.After(gathers[i - 1]);
      }
      if (target == nullptr || target == start) break;
      if (order.Position(target) >= order.Position(start)) break;  // already at least this early
      if (max_inflight_bytes_ > 0 &&
          static_cast<double>(SaturatingAdd(inflight(order.Position(target)), bytes[i])) > max_inflight_bytes_) {
        continue;  // too much in flight there: try a shorter distance
      }
      if (order.HoistBefore(start, target)) {
        changed = true;
        break;
      }
    }
  }
  return changed;
}

// Sinks every wait to the first use of its results, but not past the next start of the
// same kind on the same process group.
bool ScheduleOverlap::SinkWaits(ProgramOrder& order) const {
  bool changed = false;
  std::vector<Node*> waits;
  for (Node* node : order.nodes()) {
    if (node->op() == kWaitOp && StartOfWait(*node) != nullptr) waits.push_back(node);
  }
  for (Node* wait : waits) {
    const Node* start = StartOfWait(*wait);
    Node* limit = order.FirstUser(*wait);
    std::string group = StringArg(*start, "group");
    for (int i = order.Position(start) + 1; i < order.size(); ++i) {
      Node* node = order.at(i);
      if (node->op() != start->op() || StringArg(*node, "group") != group) continue;
      if (limit == nullptr || i < order.Position(limit)) limit = node;
      break;
    }
    // Only move later: a wait already after its limit stays (it was placed on purpose).
    if (limit == nullptr) {
      if (order.Position(wait) != order.size() - 1) {
        order.MoveBefore(wait, nullptr);
        changed = true;
      }
      continue;
    }
    if (order.Position(limit) > order.Position(wait) + 1) {
      order.MoveBefore(wait, limit);
      changed = true;
    }
  }
  return changed;
}

absl::StatusOr<bool> ScheduleOverlap::RunImpl(Module& module) {
  bool changed = false;
  for (Graph* graph : module.graphs()) {
    ProgramOrder order(*graph);
    bool moved = false;
    if (prefetch_ > 0 || !per_gather_.empty()) moved |= PrefetchGathers(order);
    moved |= SinkWaits(order);
    if (moved) order.Apply(*graph);
    changed |= moved;
    int64_t position = 0;
    for (Node* node : order.nodes()) {
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

absl::StatusOr<PerGatherPrefetch> ParsePerGatherPrefetch(absl::string_view text) {
  PerGatherPrefetch distances;
  for (absl::string_view entry : absl::StrSplit(text, '+', absl::SkipEmpty())) {
    // GROUP.PHASE.DISTANCE, the group itself possibly dotted (layers.31.bwd.0).
    size_t last = entry.rfind('.');
    int distance = -1;
    absl::string_view key = last == absl::string_view::npos ? absl::string_view() : entry.substr(0, last);
    bool phase_ok = absl::EndsWith(key, ".fwd") || absl::EndsWith(key, ".bwd");
    if (last == absl::string_view::npos || !phase_ok || key.size() <= 4 ||
        !absl::SimpleAtoi(entry.substr(last + 1), &distance) || distance < 0 || distance > kMaxPrefetch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schedule-overlap: per_gather entries are GROUP.fwd.N or GROUP.bwd.N (GROUP a module path or root, N in 0..",
          kMaxPrefetch, "), not '", entry, "'"));
    }
    if (!distances.emplace(std::string(key), distance).second) {
      return absl::InvalidArgumentError(absl::StrCat("schedule-overlap: per_gather names ", key, " twice"));
    }
  }
  return distances;
}

std::string FormatPerGatherPrefetch(const PerGatherPrefetch& distances) {
  std::string text;
  for (const auto& [key, distance] : distances) absl::StrAppend(&text, text.empty() ? "" : "+", key, ".", distance);
  return text;
}

MAGI_REGISTER(Pass, "schedule-overlap", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
  int prefetch = 1;
  double max_inflight_mb = 0;
  PerGatherPrefetch per_gather;
  for (const auto& [key, value] : options) {
    if (key == "prefetch") {
      if (!absl::SimpleAtoi(value, &prefetch) || prefetch < 0 || prefetch > kMaxPrefetch) {
        return absl::InvalidArgumentError(absl::StrCat("schedule-overlap: prefetch must be an integer in 0..",
                                                       kMaxPrefetch, ", not '", value, "'"));
      }
    } else if (key == "max_inflight_mb") {
      if (!ParseFiniteDouble(value, &max_inflight_mb) || max_inflight_mb < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule-overlap: max_inflight_mb must be a non-negative, finite number, not '", value, "'"));
      }
    } else if (key == "per_gather") {
      absl::StatusOr<PerGatherPrefetch> parsed = ParsePerGatherPrefetch(value);
      if (!parsed.ok()) return parsed.status();
      per_gather = *std::move(parsed);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule-overlap takes prefetch, max_inflight_mb and per_gather, not '", key, "'"));
    }
  }
  return std::make_unique<ScheduleOverlap>(prefetch, max_inflight_mb, std::move(per_gather));
});

}  // namespace magi
