#include "magi/backend/nccl_stream/stream_plan.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

bool HasDynamicDim(const TensorType& type) {
  return std::find(type.sizes.begin(), type.sizes.end(), kDynamicDim) != type.sizes.end();
}

bool IsCudaTensorOf(const Value* value, DType dtype) {
  if (!value->type().is_tensor()) return false;
  const TensorType& type = value->type().tensor();
  return type.dtype == dtype && type.device.type == DeviceType::kCuda;
}

// A plain bf16 -> fp32 aten::_to_copy (no layout, device or memory-format change).
bool IsWideningCast(const Node& node) {
  if (node.op() != "aten::_to_copy" || node.num_operands() != 1 || node.results().size() != 1) return false;
  if (!IsCudaTensorOf(node.operand(0), DType::kBFloat16) || !IsCudaTensorOf(node.result(0), DType::kFloat32)) {
    return false;
  }
  if (node.operand(0)->type().tensor().sizes != node.result(0)->type().tensor().sizes) return false;
  // Only a dtype change: no memory format, pinning, or move to another device.
  const Attribute* memory_format = node.FindArg("memory_format");
  if (memory_format != nullptr && !memory_format->is_none()) return false;
  const Attribute* pin_memory = node.FindArg("pin_memory");
  if (pin_memory != nullptr && !pin_memory->is_none() &&
      !(pin_memory->kind() == AttrKind::kBool && !pin_memory->as_bool())) {
    return false;
  }
  const Attribute* device = node.FindArg("device");
  if (device != nullptr && !device->is_none() &&
      !(device->kind() == AttrKind::kDevice && device->as_device() == node.result(0)->type().tensor().device)) {
    return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<StreamPlan> BuildStreamPlan(const Module& module, const Graph& graph,
                                           const StreamPlanOptions& options) {
  StreamPlan plan;
  std::vector<Node*> nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  absl::flat_hash_map<const Node*, int> index_of;
  for (int i = 0; i < n; ++i) index_of[nodes[i]] = i;
  plan.stream_of_node.assign(n, 0);
  plan.adamw_batch_of_node.assign(n, -1);
  plan.release_after.assign(n, {});

  // Collectives and their streams.
  std::map<std::pair<std::string, int>, int> stream_ids;
  for (int i = 0; i < n; ++i) {
    const Node& node = *nodes[i];
    std::optional<CollectiveKind> kind = GetCollectiveKind(node.op());
    if (!kind) continue;
    const Attribute* group_arg = node.FindArg("group");
    if (group_arg == nullptr || group_arg->kind() != AttrKind::kString) {
      return absl::InvalidArgumentError(absl::StrCat(node.DebugName(), ": no group"));
    }
    const ProcessGroup* group = module.FindProcessGroup(group_arg->as_string());
    if (group == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.DebugName(), ": process group @", group_arg->as_string(), " does not exist"));
    }
    Node* wait = WaitOfStart(node);
    if (wait == nullptr) return absl::InvalidArgumentError(absl::StrCat(node.DebugName(), ": no wait"));
    CollectivePlan collective;
    collective.start = i;
    collective.wait = index_of.at(wait);
    collective.skipped = options.skip_single_rank_collectives && group->size == 1;
    if (!collective.skipped) {
      int annotated = node.annotations().stream > 0 ? node.annotations().stream : DefaultCollectiveStream(*kind);
      auto [it, inserted] =
          stream_ids.emplace(std::make_pair(group->name, annotated), static_cast<int>(stream_ids.size()) + 1);
      if (inserted) plan.comm_streams.push_back({group->name, annotated});
      collective.stream = it->second;
      plan.stream_of_node[i] = collective.stream;
    }
    plan.collective_of_node[i] = static_cast<int>(plan.collectives.size());
    plan.collective_of_node[collective.wait] = static_cast<int>(plan.collectives.size());
    plan.collectives.push_back(collective);
  }

  // Last uses, extended for collectives (to their wait) and batched adamw (to the batch).
  absl::flat_hash_set<const Value*> outputs;
  for (const GraphOutput& output : graph.outputs()) outputs.insert(output.value);
  absl::flat_hash_map<const Value*, int> last_use;
  for (int i = 0; i < n; ++i) {
    for (const Value* operand : nodes[i]->operands()) last_use[operand] = std::max(last_use[operand], i);
  }
  for (const CollectivePlan& collective : plan.collectives) {
    for (const Value* operand : nodes[collective.start]->operands()) {
      last_use[operand] = std::max(last_use[operand], collective.wait);
    }
  }

  // AdamW batches: with optimizer overlap where every batch can be in place, else
  // maximal sets of magi::adamw nodes whose results only leave the graph, with the same
  // scalars and constants; each runs at its last member.
  // (Both forms of AdamW, plain and split, batch alike: magi_ops.h's operand mapping.)
  auto same_batch = [&](const Node& a, const Node& b) {
    for (int k : {kAdamWDecay, kAdamWStepSize, kAdamWBc2Sqrt}) {
      if (a.operand(AdamWOperandIndex(a, k)) != b.operand(AdamWOperandIndex(b, k))) return false;
    }
    AdamWConstants x = AdamWConstantsOf(a), y = AdamWConstantsOf(b);
    return x.beta1 == y.beta1 && x.beta2 == y.beta2 && x.eps == y.eps && a.op() == b.op() &&
           a.operand(kAdamWParam)->type().tensor().dtype == b.operand(kAdamWParam)->type().tensor().dtype &&
           a.operand(kAdamWParam)->type().tensor().device == b.operand(kAdamWParam)->type().tensor().device;
  };
  auto results_only_leave = [&](const Node& node) {
    for (const Value* result : node.results()) {
      if (result->has_uses()) return false;
    }
    return true;
  };
  // Whether `node`'s parameter (or its halves) and moments may be overwritten once every
  // other reader has run: distinct donated inputs that are not step outputs themselves.
  auto donated_state = [&](const Node& node) {
    absl::flat_hash_set<const Value*> state;
    const std::vector<int> state_operands = AdamWStateOperands(node);
    for (int k : state_operands) {
      const Value* value = node.operand(k);
      bool donated_input =
          value->is_graph_input() && (value->role() == InputRole::kParam || value->role() == InputRole::kOptState);
      if (!donated_input || outputs.contains(value)) return false;
      state.insert(value);
    }
    return state.size() == state_operands.size();
  };
  // The last node other than a magi::adamw that reads `root`'s memory (-1: none): its
  // own readers and those of everything that may share that memory: views of it, the
  // results of a skipped collective it feeds (they are its inputs), the results of a
  // magi::call it feeds (a partition may return an input). A collective reads until its
  // wait.
  auto last_other_read = [&](const Value* root) {
    int last = -1;
    std::vector<const Value*> pending = {root};
    absl::flat_hash_set<const Value*> seen = {root};
    while (!pending.empty()) {
      const Value* value = pending.back();
      pending.pop_back();
      for (const Use& use : value->uses()) {
        const Node& user = *use.user;
        if (IsAdamW(user)) continue;
        int reader = index_of.at(&user);
        std::vector<const Value*> aliases;
        auto collective = plan.collective_of_node.find(reader);
        if (collective != plan.collective_of_node.end()) {
          const CollectivePlan& planned = plan.collectives[collective->second];
          reader = planned.wait;
          const Node& wait = *nodes[planned.wait];
          if (planned.skipped && use.operand_index < wait.num_results()) {
            aliases.push_back(wait.result(use.operand_index));
          }
        } else if (user.op() == kCallOp) {
          for (const Value* result : user.results()) aliases.push_back(result);
        } else {
          OpTraits traits = GetOpTraits(user.op());
          if ((traits.view || traits.in_place) && traits.alias_operand == use.operand_index) {
            for (const Value* result : user.results()) aliases.push_back(result);
          }
        }
        last = std::max(last, reader);
        for (const Value* alias : aliases) {
          if (seen.insert(alias).second) pending.push_back(alias);
        }
      }
    }
    return last;
  };
  // Whether the fused multi-tensor kernel takes `node` (what an optimizer-stream batch
  // launches; anything else would run op by op on the compute stream).
  auto fused_kernel_takes = [&](const Node& node) {
    if (IsAdamWSplit(node) && (!IsCudaTensorOf(node.operand(kAdamWSplitHi), DType::kBFloat16) ||
                               !IsCudaTensorOf(node.operand(kAdamWSplitLo), DType::kInt16))) {
      return false;
    }
    for (int k : {kAdamWParam, kAdamWGrad, kAdamWExpAvg, kAdamWExpAvgSq, kAdamWDecay, kAdamWStepSize, kAdamWBc2Sqrt}) {
      if (k == kAdamWParam && IsAdamWSplit(node)) continue;
      if (!IsCudaTensorOf(node.operand(AdamWOperandIndex(node, k)), DType::kFloat32)) return false;
    }
    return true;
  };
  bool overlapped = false;
  if (options.overlap_optimizer && options.donate_optimizer_state) {
    // ready[i]: the node after which everything adamw i reads exists and nothing but
    // AdamW still reads its state (-1: from the start).
    std::vector<int> eligible;
    absl::flat_hash_map<int, int> ready;
    bool all_in_place = true;
    for (int i = 0; i < n; ++i) {
      const Node& node = *nodes[i];
      if (!IsAdamW(node) || !results_only_leave(node)) continue;
      if (!donated_state(node) || !fused_kernel_takes(node)) {
        all_in_place = false;
        break;
      }
      int at = -1;
      for (const Value* operand : node.operands()) {
        if (!operand->is_graph_input()) at = std::max(at, index_of.at(operand->producer()));
      }
      for (int k : AdamWStateOperands(node)) at = std::max(at, last_other_read(node.operand(k)));
      if (at >= i) {  // read again after its own update: not overlappable
        all_in_place = false;
        break;
      }
      eligible.push_back(i);
      ready[i] = at;
    }
    if (all_in_place && !eligible.empty()) {
      overlapped = true;
      plan.optimizer_batches_after.assign(n, {});
      // Compatible members (same scalars) in the order they become ready.
      std::vector<std::vector<int>> classes;
      for (int i : eligible) {
        auto it = std::find_if(classes.begin(), classes.end(),
                               [&](const std::vector<int>& c) { return same_batch(*nodes[c.front()], *nodes[i]); });
        if (it == classes.end()) {
          classes.push_back({i});
        } else {
          it->push_back(i);
        }
      }
      for (std::vector<int>& members : classes) {
        std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return ready.at(a) < ready.at(b); });
        AdamWBatch batch;
        int64_t elements = 0;
        auto close = [&] {
          if (batch.nodes.empty()) return;
          std::sort(batch.nodes.begin(), batch.nodes.end());
          batch.run_at = std::max(0, batch.run_at);
          batch.in_place = true;
          batch.on_optimizer_stream = true;
          plan.optimizer_batches_after[batch.run_at].push_back(static_cast<int>(plan.adamw_batches.size()));
          plan.adamw_batches.push_back(std::move(batch));
          batch = AdamWBatch();
          elements = 0;
        };
        for (int i : members) {
          if (!batch.nodes.empty() && ready.at(i) > batch.run_at && elements >= options.min_overlap_batch_elements) {
            close();
          }
          batch.nodes.push_back(i);
          batch.run_at = std::max(batch.run_at, ready.at(i));
          elements += nodes[i]->operand(kAdamWParam)->type().tensor().NumElements().value_or(0);
        }
        close();
      }
      plan.overlapped_batches = static_cast<int>(plan.adamw_batches.size());
      for (size_t b = 0; b < plan.adamw_batches.size(); ++b) {
        for (int member : plan.adamw_batches[b].nodes) {
          plan.adamw_batch_of_node[member] = static_cast<int>(b);
          // Held until the compute stream has joined the optimizer stream (index n).
          for (const Value* operand : nodes[member]->operands()) last_use[operand] = n;
        }
      }
    }
  }
  if (!overlapped) {
    std::vector<int> pending;
    for (int i = 0; i < n; ++i) {
      const Node& node = *nodes[i];
      if (!IsAdamW(node)) continue;
      if (!results_only_leave(node)) continue;  // runs alone, where it is
      if (!pending.empty() && same_batch(*nodes[pending.front()], node)) {
        pending.push_back(i);
        continue;
      }
      if (!pending.empty()) plan.adamw_batches.push_back({pending, pending.back(), false});
      pending = {i};
    }
    if (!pending.empty()) plan.adamw_batches.push_back({pending, pending.back(), false});
    for (size_t b = 0; b < plan.adamw_batches.size(); ++b) {
      AdamWBatch& batch = plan.adamw_batches[b];
      bool in_place = options.donate_optimizer_state;
      for (int member : batch.nodes) {
        plan.adamw_batch_of_node[member] = static_cast<int>(b);
        const Node& node = *nodes[member];
        for (const Value* operand : node.operands()) last_use[operand] = std::max(last_use[operand], batch.run_at);
        // Every other read (collectives until their wait, aliases too) is done when the batch runs.
        for (int k : AdamWStateOperands(node)) {
          in_place = in_place && last_use.at(node.operand(k)) <= batch.run_at &&
                     last_other_read(node.operand(k)) <= batch.run_at;
        }
        in_place = in_place && donated_state(node);
      }
      batch.in_place = in_place;
    }
  }

  // Deferred gradient casts (stream_plan.h).
  if (options.defer_grad_casts) {
    for (int i = 0; i < n; ++i) {
      const Node& cast = *nodes[i];
      if (!IsWideningCast(cast) || outputs.contains(cast.result(0)) || !cast.result(0)->has_uses()) continue;
      std::vector<const Value*> carried = {cast.result(0)};
      bool deferrable = true;
      for (const Use& use : cast.result(0)->uses()) {
        auto collective = plan.collective_of_node.find(index_of.at(use.user));
        std::optional<CollectiveKind> kind = GetCollectiveKind(use.user->op());
        if (collective == plan.collective_of_node.end() || !kind || !plan.collectives[collective->second].skipped ||
            (*kind != CollectiveKind::kReduceScatter && *kind != CollectiveKind::kAllReduce)) {
          deferrable = false;
          break;
        }
        const Node& wait = *nodes[plan.collectives[collective->second].wait];
        const Value* result = wait.result(use.operand_index);
        if (outputs.contains(result) || !result->has_uses()) {
          deferrable = false;
          break;
        }
        for (const Use& grad_use : result->uses()) {
          const Node& adamw = *grad_use.user;
          int member = index_of.at(&adamw);
          deferrable = deferrable && IsAdamW(adamw) && grad_use.operand_index == AdamWOperandIndex(adamw, kAdamWGrad) &&
                       plan.adamw_batch_of_node[member] >= 0 &&
                       IsCudaTensorOf(adamw.operand(kAdamWParam),
                                      IsAdamWSplit(adamw) ? DType::kBFloat16 : DType::kFloat32);
        }
        if (!deferrable) break;
        carried.push_back(result);
      }
      if (!deferrable) continue;
      plan.deferred_casts.push_back(i);
      plan.bf16_for_f32.insert(plan.bf16_for_f32.end(), carried.begin(), carried.end());
    }
  }

  // Releases.
  auto release = [&](const Value* value, int produced_at) {
    if (value->type().is_future() || outputs.contains(value)) return;
    auto it = last_use.find(value);
    int at = it == last_use.end() ? produced_at : it->second;
    if (at >= 0 && at < n) plan.release_after[at].push_back(value);
    if (at == n) plan.release_at_end.push_back(value);
  };
  for (const Value* input : graph.inputs()) {
    if (last_use.contains(input)) release(input, -1);
  }
  for (int i = 0; i < n; ++i) {
    for (const Value* result : nodes[i]->results()) {
      // A batched adamw's results come into being at the batch's run.
      int produced = plan.adamw_batch_of_node[i] >= 0 ? plan.adamw_batches[plan.adamw_batch_of_node[i]].run_at : i;
      release(result, produced);
    }
  }

  // What keeps the step out of a CUDA graph.
  for (const Value* input : graph.inputs()) {
    if (input->role() == InputRole::kRng) {
      plan.capture_blockers.push_back({-1, absl::StrCat("input %", input->name(),
                                                        ": random ops draw from the generator state, which a "
                                                        "replayed graph would not advance")});
    }
    if (input->type().is_tensor() && input->type().tensor().device.type != DeviceType::kCuda) {
      plan.capture_blockers.push_back({-1, absl::StrCat("input %", input->name(), " is not a CUDA tensor")});
    }
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = *nodes[i];
    // Data-dependent ops read device values on the host (a scalar, or an output size),
    // which stream capture rejects.
    if (GetOpTraits(node.op()).data_dependent) {
      plan.capture_blockers.push_back({i, absl::StrCat(node.DebugName(), ": synchronizes with the host")});
      continue;
    }
    for (const Value* result : node.results()) {
      if (!result->type().is_tensor()) continue;
      const TensorType& type = result->type().tensor();
      if (HasDynamicDim(type)) {
        plan.capture_blockers.push_back({i, absl::StrCat(node.DebugName(), ": dynamic shape")});
        break;
      }
      // A host result nothing reads (the efficient-attention kernel's philox seed and offset
      // without dropout, in fp32) does not block: a replay skips making it, and nothing
      // misses it. One that is read or returned would hold the capture run's value forever.
      if (type.device.type != DeviceType::kCuda && (result->has_uses() || outputs.contains(result))) {
        plan.capture_blockers.push_back({i, absl::StrCat(node.DebugName(), ": produces a tensor off the GPU")});
        break;
      }
    }
  }
  return plan;
}

std::string StreamPlan::Summary() const {
  int skipped = 0;
  for (const CollectivePlan& collective : collectives) skipped += collective.skipped;
  int batched = 0;
  for (const AdamWBatch& batch : adamw_batches) batched += static_cast<int>(batch.nodes.size());
  return absl::StrCat(
      collectives.size(), " collectives (", skipped, " skipped: one rank) on ", comm_streams.size(),
      " communication streams, ", 2 * (collectives.size() - skipped), " cross-stream edges; ", batched,
      " magi::adamw in ", adamw_batches.size(), " multi-tensor batches",
      adamw_batches.empty() ? "" : (adamw_batches[0].in_place ? " (in place)" : " (out of place)"),
      overlapped_batches > 0 ? " on the optimizer stream, overlapping the backward" : "", "; ",
      deferred_casts.empty() ? "" : absl::StrCat(deferred_casts.size(), " gradient casts deferred into AdamW; "),
      capture_blockers.empty() ? "capturable as one CUDA graph"
                               : absl::StrCat(capture_blockers.size(), " capture blockers"));
}

}  // namespace magi
