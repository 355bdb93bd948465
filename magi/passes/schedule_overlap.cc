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
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

constexpr int kMaxPrefetch = ScheduleOverlapOptions::kMaxPrefetch;

OptionCodec<PerGatherPrefetch> PerGatherCodec() {
  OptionCodec<PerGatherPrefetch> codec;
  codec.syntax = "GROUP.fwd.N+GROUP.bwd.N+...";
  codec.expected = absl::StrCat("entries GROUP.fwd.N or GROUP.bwd.N joined by + (GROUP a module path or root, N in 0..",
                                kMaxPrefetch, ", each GROUP.PHASE once)");
  codec.parse = [](absl::string_view text, PerGatherPrefetch& value) {
    absl::StatusOr<PerGatherPrefetch> parsed = ParsePerGatherPrefetch(text);
    if (!parsed.ok()) return false;
    value = *std::move(parsed);
    return true;
  };
  codec.print = FormatPerGatherPrefetch;
  return codec;
}

}  // namespace

std::string GatherKey(const Node& start) {
  const std::string& path = start.annotations().module_path;
  return absl::StrCat(path.empty() ? "root" : path, start.annotations().phase == Phase::kBackward ? ".bwd" : ".fwd");
}

int ScheduleOverlap::DistanceOf(const Node& start) const {
  if (!options_.per_gather.empty()) {
    auto it = options_.per_gather.find(GatherKey(start));
    if (it != options_.per_gather.end()) return it->second;
  }
  return options_.prefetch;
}

bool ScheduleOverlap::PrefetchGathers(ProgramOrder& order) const {
  const double max_inflight_bytes = options_.max_inflight_mb * 1e6;  // 0: no limit
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
      if (max_inflight_bytes > 0 &&
          static_cast<double>(SaturatingAdd(inflight(order.Position(target)), bytes[i])) > max_inflight_bytes) {
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

absl::StatusOr<bool> ScheduleOverlap::RunOnGraph(Graph& graph) {
  bool changed = false;
  ProgramOrder order(graph);
  bool moved = false;
  if (options_.prefetch > 0 || !options_.per_gather.empty()) moved |= PrefetchGathers(order);
  moved |= SinkWaits(order);
  if (moved) order.Apply(graph);
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

const OptionSchema<ScheduleOverlapOptions>& ScheduleOverlapOptions::Schema() {
  static const auto* schema = new OptionSchema<ScheduleOverlapOptions>({
      Field("prefetch", &ScheduleOverlapOptions::prefetch, Integer(0, kMaxPrefetch), kAlwaysPrinted),
      Field("max_inflight_mb", &ScheduleOverlapOptions::max_inflight_mb, Number(0)),
      Field("per_gather", &ScheduleOverlapOptions::per_gather, PerGatherCodec()),
  });
  return *schema;
}

MAGI_REGISTER_PASS(ScheduleOverlap);

}  // namespace magi
