// RecomputeFusible: for a step whose compute a fusing backend compiles (the inductor
// partition backend), recompute in the backward the elementwise activations whose inputs
// are saved anyway, instead of saving them.
//
// In a captured step the backward reads what autograd saved: for SwiGLU both silu(h1) and
// h1, for RMSNorm both x * rsqrt(...) and x and the rsqrt. Where a fusing backend compiles
// the forward, an elementwise value that only feeds other elementwise ops is computed in
// registers and never written, except that it is saved: then it is written once in the
// forward and read once in the backward, and it occupies memory in between. When its
// operands are saved for the backward anyway, recomputing it there adds no traffic (the
// fused backward kernel reads those operands already) and saves its bytes twice over plus
// the memory (what AOTAutograd's min-cut partitioner does for per-block torch.compile).
// It can still keep an operand alive a little longer (up to the copy, when its last
// backward read came earlier), so the compile driver plans the result and takes the
// rewrite back if the peak grew.
//
// A forward node is recomputed when all of these hold:
//   - it is elementwise (op_traits.h), movable (not random, effectful or communication),
//     not a view, with tensor results that are not graph outputs (nor have views that
//     are), and the backward reads a result (directly or through views of it);
//   - every tensor operand is a graph input, a 0-dim tensor, or a value the backward reads
//     itself (saved regardless);
//   - every forward reader of its results (through views) is elementwise, and every
//     backward reader is elementwise or a sum/mean, and the backend accepts them all
//     (`declined` says which it does not): so the value is neither written in the forward
//     nor materialized by its copy in the backward.
// The rewrite is RecomputeForBackward's (auto_recompute.h): the copies go right before
// the first backward use. Values do not change (the same ops on the same inputs).
//
// On ATen kernels (no fusion) it would cost a kernel per copy: the compile driver runs it
// before partitioning when a partition backend is used (PartitionOptions::recompute_fusible,
// on by default), with the backend's declined nodes. Registered as "recompute-fusible" too
// (every node then taken as fusible).
#ifndef MAGI_PASSES_RECOMPUTE_FUSIBLE_H_
#define MAGI_PASSES_RECOMPUTE_FUSIBLE_H_

#include <functional>
#include <vector>

#include "magi/ir/graph.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/pass.h"

namespace magi {

// True for a node the fusing backend will not compile (a kernel boundary).
using DeclinedByBackend = std::function<bool(const Node&)>;

// The forward nodes of `graph` chosen by the rules above, in program order.
std::vector<Node*> ChooseFusibleRecompute(const Graph& graph, const DeclinedByBackend& declined = nullptr);

// Recomputes ChooseFusibleRecompute's choice for the backward; returns how many forward
// nodes were chosen. With `undo`, records the rewrite for UndoRecompute (auto_recompute.h).
int RecomputeFusible(Graph& graph, const DeclinedByBackend& declined = nullptr, RecomputeUndo* undo = nullptr);

class RecomputeFusiblePass : public GraphPass {
 public:
  static constexpr absl::string_view kName = "recompute-fusible";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_RECOMPUTE_FUSIBLE_H_
