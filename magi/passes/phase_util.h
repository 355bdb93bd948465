// Where the backward of a training step starts, for passes that treat forward and
// backward differently (resharding, recompute).
#ifndef MAGI_PASSES_PHASE_UTIL_H_
#define MAGI_PASSES_PHASE_UTIL_H_

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "magi/ir/graph.h"

namespace magi {

// Program position of the first compute node annotated phase=bwd (collectives may be
// prefetched into forward), or -1 if there is none.
int BackwardBoundary(const Graph& graph);
// The same on a snapshot of the program order (Graph::nodes()).
int BackwardBoundary(absl::Span<Node* const> nodes);

// The shard an all-gather operand carries: with mixed precision (or CPU offload) each
// gather reads its own cast or copy of the shard (`aten::_to_copy`), so two gathers of one
// parameter have different operands; this sees through such a cast to the value cast (the
// shard input). A backward gather of magi::local_shard pieces of a forward gather's
// result (reshard_after_forward=<int>) carries what that forward gather gathered.
const Value* GatheredShard(const Value* operand);

// For every all-gather result whose gathered shard (GatheredShard, in the same dtype) is
// also gathered again by a backward all-gather: the backward result. Keyed by forward
// result.
absl::flat_hash_map<Value*, Value*> BackwardRegathers(const Graph& graph);
absl::flat_hash_map<Value*, Value*> BackwardRegathers(absl::Span<Node* const> nodes);

}  // namespace magi

#endif  // MAGI_PASSES_PHASE_UTIL_H_
