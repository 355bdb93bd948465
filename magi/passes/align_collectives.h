// Collectives placed where a fusing backend has a kernel boundary anyway.
//
// The compile driver cuts the step into partitions at every collective start and wait
// (magi/compiler/partitioner.h), and a fusing backend (inductor) fuses only within a
// partition. Where a collective sits inside a chain of fusible compute, the cut costs
// memory traffic: on the Llama step the wait for a block's gathered weights sits right
// before its first user, RMSNorm's `* weight`, so the norm's `x * rsqrt(mean(x^2))` is
// written to memory by one partition and read back by the next to be multiplied by the
// weight (an extra kernel and a full activation written and read, per block); in the
// backward, the reduce-scatter of a block's gradients starts right after the norm
// weight's gradient, cutting the norm's backward in two (four kernels where one
// reduction would do). A cut next to a GEMM or an attention costs nothing: their inputs
// and outputs are in memory whatever is fused around them.
//
// What the pass does, per group (a maximal run of adjacent communication nodes and of nodes
// that only feed collective starts, such as the gradients' casts to the reduction dtype,
// which a fusing backend declines but the primary folds into the reduction): if the
// nearest compute node on one side or the other (views looked through, unless the caller
// makes them anchors) is an anchor (matmul-like, attention, a node with effects or
// randomness, a magi::call, another collective, a node the caller names, e.g. one the
// fusing backend declines) or there is none (the graph's start or end), the group stays.
// Otherwise it moves to the nearest such place, counted in nodes crossed: later across
// nodes that use none of its results, or earlier across nodes none of its nodes reads,
// never across another communication node, a node with effects or randomness, or more than
// `max_nodes` nodes per move, and never the way that loses overlap: a group with a start
// whose wait is elsewhere never moves later (its collective would start later), one with a
// wait whose start is elsewhere never earlier (the stream would block sooner). Only a group
// that holds its starts' waits (collectives that run exposed wherever they sit) may go
// either way, and only through places where no other collective is in flight (else it
// would queue behind that one and change what computes while it runs); a tie goes earlier. So in a step scheduled for overlap (schedule-overlap:
// gathers started a layer ahead, waits at their first use) the pass moves little or
// nothing; it pays where collectives run exposed, as in world 1, where nccl_stream skips
// them. A group with no such place within reach stays. A group that lands beside
// another one, or beside a node that feeds it, is one group with it from then on and is
// looked at again from there (so a collective may travel further than `max_nodes` in all);
// one run is a fixed point.
//
// The cost: buffers live a little longer or shorter (the compile driver predicts the step
// again and keeps a memory budget). What it does NOT do: change which collectives run, their order among themselves, or any
// value. Registered as "align-collectives{max_nodes=N}" (default 64); the compile driver
// runs it before partitioning when a partition backend is used
// (PartitionOptions::align_collectives), with the backend's declined nodes as anchors.
#ifndef MAGI_PASSES_ALIGN_COLLECTIVES_H_
#define MAGI_PASSES_ALIGN_COLLECTIVES_H_

#include <functional>

#include "magi/ir/graph.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

// Nodes beside which a partition cut costs nothing beyond what the default anchors say.
using ExtraAnchor = std::function<bool(const Node&)>;

// Moves the groups of `graph` as described above; returns how many groups moved.
int AlignCollectives(Graph& graph, int max_nodes, const ExtraAnchor& extra_anchor = nullptr);

struct AlignCollectivesOptions : PassOptions<AlignCollectivesOptions> {
  static constexpr int kDefaultMaxNodes = 64;
  int max_nodes = kDefaultMaxNodes;  // nodes crossed per move, at most (>= 0)

  static const OptionSchema<AlignCollectivesOptions>& Schema();
};

class AlignCollectivesPass : public GraphPass {
 public:
  using Options = AlignCollectivesOptions;
  static constexpr absl::string_view kName = "align-collectives";
  static constexpr int kDefaultMaxNodes = Options::kDefaultMaxNodes;

  explicit AlignCollectivesPass(Options options = {}) : options_(options) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_ALIGN_COLLECTIVES_H_
