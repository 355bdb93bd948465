// Single-rank collective elision: a collective over a process group of one rank is the
// identity (an all-gather of one shard, a reduce-scatter or all-reduce of one
// contribution with any reduce_op, an all-to-all with itself), so its wait's results are
// replaced by the start's inputs and both nodes are erased.
//
// Why: a graph sharded for one rank (FsdpInference and FsdpTrainer at world 1) keeps its
// per-layer all-gathers. A runtime skips them (nccl_stream's skip_single_rank), but in the
// graph they still cut every layer into pieces: partition backends decline collectives, so
// each layer's RMSNorm is split between two Inductor partitions at its weight's gather.
//
// It does NOT elide a collective whose wait result differs in type from its input (a
// padded shard sliced back, a layout change), or one whose result is a graph output
// while its input is a graph input (an output must not start aliasing an input), or a
// start without its wait. Registered as "elide-single-rank-collectives"; no options.
#ifndef MAGI_PASSES_ELIDE_SINGLE_RANK_COLLECTIVES_H_
#define MAGI_PASSES_ELIDE_SINGLE_RANK_COLLECTIVES_H_

#include "magi/passes/pass.h"

namespace magi {

class ElideSingleRankCollectives : public GraphPass {
 public:
  static constexpr absl::string_view kName = "elide-single-rank-collectives";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_ELIDE_SINGLE_RANK_COLLECTIVES_H_
