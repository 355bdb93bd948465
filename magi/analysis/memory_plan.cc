#include "magi/analysis/memory_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "magi/analysis/liveness.h"
#include "magi/base/checked_math.h"

namespace magi {

int64_t MemoryPlan::total_buffer_bytes() const {
  int64_t total = 0;
  for (int64_t size : buffer_sizes) total = SaturatingAdd(total, size);
  return total;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, bool assign_buffers, const LivenessOptions& options,
                                      const WorkingBytesFn& working_bytes) {
  return PlanMemory(graph, graph.nodes(), assign_buffers, options, working_bytes);
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, absl::Span<Node* const> nodes, bool assign_buffers,
                                      const LivenessOptions& options, const WorkingBytesFn& working_bytes) {
  absl::StatusOr<Liveness> liveness = ComputeLiveness(graph, nodes, options);
  if (!liveness.ok()) return liveness.status();
  const int n = liveness->num_nodes;
  const std::vector<StorageLifetime>& storages = liveness->storages;

  // Byte counts are checked: a sum past int64 is an error naming where it happens, never
  // a wrapped (and so wrong) peak.
  auto overflow = [&](int index) {
    return absl::OutOfRangeError(absl::StrCat(
        "graph @", graph.name(), ": the bytes live ",
        index < 0 ? std::string("at the start (graph inputs)") : absl::StrCat("at ", nodes[index]->DebugName()),
        " add up to more than int64 can hold (", std::numeric_limits<int64_t>::max(), ")"));
  };
  MemoryPlan plan;
  plan.live_after.assign(n, 0);
  // One sweep per account: the device's (plan.peak_*, live_after) and the host's.
  std::vector<int64_t> host_live_after;
  bool any_host = false;
  for (const StorageLifetime& storage : storages) any_host |= storage.host;
  for (bool host : {false, true}) {
    if (host && !any_host) break;
    std::vector<int64_t> allocated(n, 0), freed(n, 0);
    int64_t live = 0;
    for (const StorageLifetime& storage : storages) {
      if (storage.host != host) continue;
      int64_t& total = storage.born < 0 ? live : allocated[storage.born];
      std::optional<int64_t> sum = CheckedAdd(total, storage.bytes);
      if (!sum) return overflow(storage.born);
      total = *sum;
      // Freed bytes at a node are at most the bytes live there: checked above.
      if (storage.dies >= 0 && storage.dies < n) freed[storage.dies] = SaturatingAdd(freed[storage.dies], storage.bytes);
    }
    int64_t& peak = host ? plan.host_peak_bytes : plan.peak_bytes;
    int& peak_node = host ? plan.host_peak_node : plan.peak_node;
    std::vector<int64_t>& live_after = host ? host_live_after : plan.live_after;
    live_after.assign(n, 0);
    peak = live;
    if (!host) plan.start_bytes = live;
    for (int i = 0; i < n; ++i) {
      // Results exist while operands are held; a node with inner buffers holds more while it runs.
      const int64_t running = !host && working_bytes ? std::max(allocated[i], working_bytes(*nodes[i])) : allocated[i];
      std::optional<int64_t> at_node = CheckedAdd(live, running);
      if (!at_node) return overflow(i);
      if (*at_node > peak) {
        peak = *at_node;
        peak_node = i;
      }
      live += allocated[i];  // cannot overflow: at most *at_node
      live -= freed[i];
      live_after[i] = live;
    }
  }
  if (!assign_buffers) return plan;

  // Greedy first fit: storages by birth; a buffer is free once its storage is dead.
  std::vector<int> order(storages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return storages[a].born != storages[b].born ? storages[a].born < storages[b].born
                                                : storages[a].bytes > storages[b].bytes;
  });
  std::vector<int> buffer_free_after;  // program index after which the buffer is free
  for (int index : order) {
    const StorageLifetime& storage = storages[index];
    int buffer = -1;
    for (size_t b = 0; b < buffer_free_after.size(); ++b) {
      if (buffer_free_after[b] < storage.born && plan.buffer_sizes[b] >= storage.bytes &&
          plan.buffer_on_host[b] == storage.host) {
        buffer = static_cast<int>(b);
        break;
      }
    }
    if (buffer < 0) {
      buffer = static_cast<int>(plan.buffer_sizes.size());
      plan.buffer_sizes.push_back(storage.bytes);
      plan.buffer_on_host.push_back(storage.host);
      buffer_free_after.push_back(0);
    }
    buffer_free_after[buffer] = storage.dies;
    plan.buffer_of[storage.value] = buffer;
  }
  return plan;
}

std::vector<StorageLifetime> StoragesLiveAt(const Liveness& liveness, int index) {
  std::vector<StorageLifetime> live;
  for (const StorageLifetime& storage : liveness.storages) {
    // As PlanMemory counts them: a storage nobody reads (dies -1) is never freed.
    if (!storage.host && storage.born <= index && (storage.dies < 0 || storage.dies >= index)) live.push_back(storage);
  }
  std::stable_sort(live.begin(), live.end(),
                   [](const StorageLifetime& a, const StorageLifetime& b) { return a.bytes > b.bytes; });
  return live;
}

}  // namespace magi
