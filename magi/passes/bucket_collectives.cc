#include "magi/passes/bucket_collectives.h"

#include <map>
#include <memory>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/base/checked_math.h"
#include "magi/base/numbers.h"
#include "magi/passes/schedule_util.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

// What must agree for two collectives to share a bucket.
// Phase too: a bucket never spans forward and backward (that would keep parameters
// gathered for backward alive through the rest of forward; prefetching does that
// deliberately, bucketing should not).
using BucketKey = std::tuple<CollectiveKind, std::string, std::string, int, int>;

std::optional<BucketKey> KeyOf(const Node& start) {
  std::optional<CollectiveKind> kind = GetCollectiveKind(start.op());
  if (!kind || start.num_operands() == 0) return std::nullopt;
  DType dtype = start.operand(0)->type().tensor().dtype;
  for (const Value* operand : start.operands()) {
    if (operand->type().tensor().dtype != dtype) return std::nullopt;
  }
  return BucketKey{*kind, StringArg(start, "group"), StringArg(start, "reduce_op"), static_cast<int>(dtype),
                   static_cast<int>(start.annotations().phase)};
}

// Fuses `a` (earlier) and `b` into one collective; null if no placement keeps the
// graph valid.
Node* Merge(Graph& graph, Node* a, Node* b, int64_t bucket, absl::flat_hash_set<const Node*>& erased) {
  Node* wait_a = WaitOfStart(*a);
  Node* wait_b = WaitOfStart(*b);
  if (wait_a == nullptr || wait_b == nullptr) return nullptr;
  const ProcessGroup* group =
      graph.module() == nullptr ? nullptr : graph.module()->FindProcessGroup(StringArg(*a, "group"));
  if (group == nullptr) return nullptr;
  CollectiveKind kind = *GetCollectiveKind(a->op());
  int max_hoisted = kind == CollectiveKind::kAllGather ? 16 : 0;  // never move gradient compute

  Node* start_before = nullptr;  // where the fused start goes
  Node* wait_before = nullptr;   // where the fused wait goes
  if (HoistBefore(graph, b, a, max_hoisted)) {
    start_before = a;
    std::vector<Node*> order = graph.nodes();
    wait_before = IndexOf(order, wait_a) < IndexOf(order, wait_b) ? wait_a : wait_b;
  } else {
    std::vector<Node*> order = graph.nodes();
    Node* first_use_a = FirstUserIn(order, *wait_a);
    if (first_use_a != nullptr && IndexOf(order, first_use_a) < IndexOf(order, b)) return nullptr;
    start_before = b;
    wait_before =
        first_use_a != nullptr && IndexOf(order, first_use_a) < IndexOf(order, wait_b) ? first_use_a : wait_b;
  }

  std::vector<Value*> inputs(a->operands().begin(), a->operands().end());
  inputs.insert(inputs.end(), b->operands().begin(), b->operands().end());
  absl::StatusOr<Node*> fused =
      AddCollectiveStart(graph, kind, inputs, *group, StringArg(*a, "reduce_op"), start_before);
  if (!fused.ok()) return nullptr;
  Node* fused_wait = AddWait(graph, *fused, wait_before);
  for (Node* node : {*fused, fused_wait}) {
    node->mutable_annotations() = a->annotations();
    node->mutable_annotations().bucket = bucket;
    node->mutable_annotations().schedule = -1;
  }
  for (int i = 0; i < wait_a->num_results(); ++i) graph.ReplaceAllUsesWith(wait_a->result(i), fused_wait->result(i));
  for (int i = 0; i < wait_b->num_results(); ++i) {
    graph.ReplaceAllUsesWith(wait_b->result(i), fused_wait->result(wait_a->num_results() + i));
  }
  for (Node* dead : {wait_a, wait_b, a, b}) {
    erased.insert(dead);
    graph.EraseNode(dead);
  }
  return *fused;
}

}  // namespace

const OptionSchema<BucketCollectivesOptions>& BucketCollectivesOptions::Schema() {
  static const auto* schema = new OptionSchema<BucketCollectivesOptions>({
      Field("max_mb", &BucketCollectivesOptions::max_mb, Number(0), kAlwaysPrinted),
      Field("kinds", &BucketCollectivesOptions::kinds,
            Choice<std::optional<CollectiveKind>>({{"all", std::nullopt},
                                                   {"all_gather", CollectiveKind::kAllGather},
                                                   {"reduce_scatter", CollectiveKind::kReduceScatter}})),
  });
  return *schema;
}

int64_t BucketCollectives::BucketBytes(const Node& start) {
  int64_t bytes = 0;
  bool gather = start.op() == kAllGatherStartOp;
  for (const Value* value :
       gather ? start.results() : std::vector<Value*>(start.operands().begin(), start.operands().end())) {
    bytes = SaturatingAdd(bytes, ValueBytes(*value));  // past int64 fits no bucket anyway
  }
  return bytes;
}

absl::StatusOr<bool> BucketCollectives::RunOnGraph(Graph& graph) {
  const double max_bytes = options_.max_mb * 1e6;
  bool changed = false;
  int64_t next_bucket = 0;
  for (const Node* node : graph.nodes()) next_bucket = std::max(next_bucket, node->annotations().bucket + 1);
  // The last start seen per key: the candidate to fuse with the next one.
  std::map<BucketKey, Node*> open;
  absl::flat_hash_set<const Node*> erased;  // nodes of the snapshot below that are gone
  for (Node* node : graph.nodes()) {
    if (erased.contains(node)) continue;
    std::optional<BucketKey> key = KeyOf(*node);
    if (!key || (options_.kinds && std::get<0>(*key) != *options_.kinds)) continue;
    auto it = open.find(*key);
    if (it == open.end()) {
      open[*key] = node;
      continue;
    }
    Node* previous = it->second;
    if (static_cast<double>(SaturatingAdd(BucketBytes(*previous), BucketBytes(*node))) <= max_bytes) {
      int64_t bucket = previous->annotations().bucket >= 0 ? previous->annotations().bucket : next_bucket++;
      if (Node* fused = Merge(graph, previous, node, bucket, erased)) {
        it->second = fused;
        changed = true;
        continue;
      }
    }
    it->second = node;
  }
  return changed;
}

MAGI_REGISTER_PASS(BucketCollectives);

}  // namespace magi
