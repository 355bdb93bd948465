// Where the backward of a training step starts, for passes that treat forward and
// backward differently (resharding, recompute).
#ifndef MAGI_PASSES_PHASE_UTIL_H_
#define MAGI_PASSES_PHASE_UTIL_H_

#include "absl/container/flat_hash_map.h"
#include "magi/ir/graph.h"

namespace magi {

// Program position of the first compute node annotated phase=bwd (collectives may be
// prefetched into forward), or -1 if there is none.
int BackwardBoundary(const Graph& graph);

// For every all-gather result whose gathered shard is also gathered again by a
// backward all-gather: the backward result. Keyed by forward result.
absl::flat_hash_map<Value*, Value*> BackwardRegathers(const Graph& graph);

}  // namespace magi

#endif  // MAGI_PASSES_PHASE_UTIL_H_
