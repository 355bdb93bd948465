#include "magi/passes/recompute_probe.h"

#include <algorithm>
#include <functional>

#include "magi/analysis/liveness.h"
#include "magi/analysis/op_traits.h"
#include "magi/base/checked_math.h"
#include "magi/ir/collectives.h"
#include "magi/passes/phase_util.h"

namespace magi {

absl::StatusOr<RecomputePeakProbe> RecomputePeakProbe::Build(const Graph& graph) { return Build(graph, graph.nodes()); }

absl::StatusOr<RecomputePeakProbe> RecomputePeakProbe::Build(const Graph& graph, const std::vector<Node*>& nodes) {
  RecomputePeakProbe probe;
  probe.n_ = static_cast<int>(nodes.size());
  const int n = probe.n_;
  probe.nodes_.assign(nodes.begin(), nodes.end());
  probe.index_.reserve(n);
  for (int i = 0; i < n; ++i) probe.index_[nodes[i]] = i;
  probe.boundary_ = BackwardBoundary(nodes);
  absl::StatusOr<Liveness> liveness = ComputeLiveness(graph, nodes);
  if (!liveness.ok()) return liveness.status();
  const int storages = static_cast<int>(liveness->storages.size());
  probe.storage_of_ = std::move(liveness->storage_of);
  probe.bytes_.resize(storages);
  probe.born_.resize(storages);
  probe.dies_.resize(storages);
  probe.owner_producer_.resize(storages);
  for (int s = 0; s < storages; ++s) {
    const StorageLifetime& storage = liveness->storages[s];
    probe.bytes_[s] = storage.host ? 0 : storage.bytes;  // PlanMemory's peak is the device's
    probe.born_[s] = storage.born;
    probe.dies_[s] = storage.dies;
    const Node* producer = storage.value->producer();
    probe.owner_producer_[s] = producer == nullptr ? -1 : probe.index_.at(producer);
  }
  // Where a node holds its operands: at itself, and a collective start until its wait.
  std::vector<int> hold(n);
  for (int i = 0; i < n; ++i) hold[i] = i;
  for (int i = 0; i < n; ++i) {
    if (nodes[i]->op() != kWaitOp) continue;
    const Node* start = StartOfWait(*nodes[i]);
    auto it = start == nullptr ? probe.index_.end() : probe.index_.find(start);
    if (it != probe.index_.end()) hold[it->second] = std::max(hold[it->second], i);
  }
  probe.hold_ = hold;
  probe.owner_.resize(storages);
  for (int s = 0; s < storages; ++s) probe.owner_[s] = liveness->storages[s].value;
  probe.is_view_.resize(n);
  for (int i = 0; i < n; ++i) probe.is_view_[i] = IsViewOp(nodes[i]->op()) && nodes[i]->num_operands() > 0;
  for (const GraphOutput& output : graph.outputs()) probe.outputs_[output.value] = true;
  const int boundary = probe.boundary_ < 0 ? n : probe.boundary_;
  probe.forward_views_.resize(n);
  for (int i = 0; i < boundary; ++i) {
    const Node* node = nodes[i];
    if (probe.is_view_[i] && node->operand(0)->producer() != nullptr) {
      probe.forward_views_[probe.index_.at(node->operand(0)->producer())].push_back(i);
    }
  }
  // Backward reads of forward values, and how long backward holds each value (through
  // backward views, whose results share its storage): users come after, so go backwards.
  for (int u = n - 1; u >= boundary; --u) {
    const Node* user = nodes[u];
    for (int k = 0; k < user->num_operands(); ++k) {
      const Value* value = user->operand(k);
      int& held = probe.backward_hold_[value];
      held = std::max(held, hold[u]);
      if (k == 0 && probe.is_view_[u] && probe.storage_of_.contains(value)) {
        for (const Value* result : user->results()) {
          auto it = probe.backward_hold_.find(result);
          if (it != probe.backward_hold_.end()) held = std::max(held, it->second);
        }
      }
    }
  }
  for (int u = boundary; u < n; ++u) {
    for (const Value* operand : nodes[u]->operands()) {
      const Node* producer = operand->producer();
      if (producer == nullptr) continue;
      int p = probe.index_.at(producer);
      if (p < boundary) probe.backward_reads_.push_back({u, operand, p});
    }
  }
  for (const auto& [forward, backward] : BackwardRegathers(nodes)) {
    auto storage = probe.storage_of_.find(backward);
    if (storage == probe.storage_of_.end() || backward->producer() == nullptr) continue;
    probe.regathers_[forward] = {storage->second, probe.index_.at(backward->producer())};
  }
  return probe;
}

int RecomputePeakProbe::DeathAfterRewrite(int storage, const std::vector<char>& recomputed) const {
  int death = owner_producer_[storage];
  const int boundary = boundary_ < 0 ? n_ : boundary_;
  std::vector<const Value*> stack = {owner_[storage]};
  while (!stack.empty()) {
    const Value* value = stack.back();
    stack.pop_back();
    if (outputs_.contains(value)) return n_;
    const Node* producer = value->producer();
    const bool moves_to_copy = producer != nullptr && recomputed[IndexOf(producer)];
    for (const magi::Use& use : value->uses()) {
      const int user = IndexOf(use.user);
      if (user >= boundary && moves_to_copy) continue;  // this read now reads the copy
      death = std::max(death, hold_[user]);
      if (use.operand_index == 0 && is_view_[user]) {
        for (const Value* result : use.user->results()) stack.push_back(result);
      }
    }
  }
  return death;
}

int64_t RecomputePeakProbe::Peak(const std::vector<Node*>& chosen) const {
  const int n = n_;
  const int storages = static_cast<int>(bytes_.size());
  std::vector<char> recomputed(n, 0);
  if (boundary_ >= 0) {
    std::vector<int> stack;
    for (const Node* node : chosen) {
      int i = IndexOf(node);
      if (!recomputed[i]) {
        recomputed[i] = 1;
        stack.push_back(i);
      }
    }
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      for (int view : forward_views_[i]) {
        if (!recomputed[view]) {
          recomputed[view] = 1;
          stack.push_back(view);
        }
      }
    }
  }
  // The copies RecomputeForBackward makes, in the order it makes them. Storage ids:
  // 0..storages-1 the graph's, then one per copy result that owns storage.
  std::vector<int> copy_user;                              // the node each copy is inserted before
  absl::flat_hash_map<const Value*, int> copy_storage;     // copied value -> storage of its copy
  absl::flat_hash_map<const Value*, bool> copied;
  std::vector<int64_t> extra_bytes;                        // copy-owned storages
  std::vector<int> extra_born;                             // their copy
  std::vector<std::pair<int, int>> held_by_copy;           // (storage, copy) a copy reads
  std::function<void(const Value*, int)> materialize = [&](const Value* value, int user) {
    if (copied.contains(value)) return;
    const Node* producer = value->producer();
    const int p = IndexOf(producer);
    std::vector<int> reads;  // storages the copy reads
    int operand0 = -1;
    for (int k = 0; k < producer->num_operands(); ++k) {
      const Value* operand = producer->operand(k);
      const int operand_producer = operand->producer() == nullptr ? -1 : IndexOf(operand->producer());
      auto own = storage_of_.find(operand);
      int storage = own == storage_of_.end() ? -1 : own->second;
      if (operand_producer >= 0 && recomputed[operand_producer]) {
        materialize(operand, user);
        auto it = copy_storage.find(operand);
        storage = it == copy_storage.end() ? -1 : it->second;
      } else {
        auto regather = regathers_.find(operand);
        if (regather != regathers_.end() && regather->second.producer < user) storage = regather->second.storage;
      }
      if (k == 0) operand0 = storage;
      if (storage >= 0) reads.push_back(storage);
    }
    const int copy = static_cast<int>(copy_user.size());
    copy_user.push_back(user);
    for (int storage : reads) held_by_copy.emplace_back(storage, copy);
    const bool view = is_view_[p] && operand0 >= 0;
    for (const Value* result : producer->results()) {
      copied[result] = true;
      if (view) {
        copy_storage[result] = operand0;
        continue;
      }
      auto own = storage_of_.find(result);
      if (own == storage_of_.end()) continue;  // no storage (a future)
      copy_storage[result] = storages + static_cast<int>(extra_bytes.size());
      extra_bytes.push_back(bytes_[own->second]);
      extra_born.push_back(copy);
    }
  };
  for (const BackwardRead& read : backward_reads_) {
    if (recomputed[read.producer]) materialize(read.value, read.user);
  }

  // Program indices after the copies are inserted: copy j (made for user u_j, copies in
  // order of u) lands at u_j + j; node i moves down by the copies inserted at or before it.
  const int copies = static_cast<int>(copy_user.size());
  std::vector<int> shift(n + 1, 0);
  for (int user : copy_user) ++shift[user];
  for (int i = 1; i <= n; ++i) shift[i] += shift[i - 1];
  auto moved = [&](int index) { return index < 0 ? -1 : index >= n ? n + copies : index + shift[index]; };
  auto copy_index = [&](int copy) { return copy_user[copy] + copy; };

  // Storages a recomputed value shares: their backward reads may have moved to copies.
  std::vector<char> affected(storages, 0);
  for (int i = 0; i < n; ++i) {
    if (!recomputed[i]) continue;
    for (const Value* result : nodes_[i]->results()) {
      auto storage = storage_of_.find(result);
      if (storage != storage_of_.end()) affected[storage->second] = 1;
    }
  }
  const int total = storages + static_cast<int>(extra_bytes.size());
  std::vector<int> born(total), dies(total);
  for (int s = 0; s < storages; ++s) {
    born[s] = moved(born_[s]);
    dies[s] = moved(affected[s] ? DeathAfterRewrite(s, recomputed) : dies_[s]);
  }
  for (size_t e = 0; e < extra_bytes.size(); ++e) {
    born[storages + e] = copy_index(extra_born[e]);
    dies[storages + e] = born[storages + e];
  }
  for (const auto& [storage, copy] : held_by_copy) dies[storage] = std::max(dies[storage], copy_index(copy));
  for (const auto& [value, storage] : copy_storage) {
    auto held = backward_hold_.find(value);
    if (held != backward_hold_.end()) dies[storage] = std::max(dies[storage], moved(held->second));
  }

  // PlanMemory's sweep.
  const int length = n + copies;
  std::vector<int64_t> allocated(length, 0), freed(length, 0);
  int64_t live = 0;
  for (int s = 0; s < total; ++s) {
    const int64_t size = s < storages ? bytes_[s] : extra_bytes[s - storages];
    int64_t& into = born[s] < 0 ? live : allocated[born[s]];
    into = SaturatingAdd(into, size);
    if (dies[s] >= 0 && dies[s] < length) freed[dies[s]] = SaturatingAdd(freed[dies[s]], size);
  }
  int64_t peak = live;
  for (int i = 0; i < length; ++i) {
    live = SaturatingAdd(live, allocated[i]);
    peak = std::max(peak, live);
    live -= freed[i];
  }
  return peak;
}

}  // namespace magi
