// Dead code elimination.
//
// Removes nodes none of whose results is used by another node or is a graph output,
// repeatedly, in one backward sweep (so a dead chain, or a collective start whose
// wait is dead, goes at once). Registered as "dce".
//
// It does NOT remove: graph inputs (they are the graph's signature); nodes that may
// have side effects (OpTraits::side_effects in magi/analysis/op_traits.h): ATen
// in-place ops (aten::add_.Tensor, aten::copy_, aten::_foreach_add_), out= variants
// (overload "out"), and batch norm, which updates running statistics inside the kernel.
// Collectives are removed only as a whole start/wait pair, never half, because every
// rank runs the same graph and so drops the same pair.
#ifndef MAGI_PASSES_DCE_H_
#define MAGI_PASSES_DCE_H_

#include "magi/passes/pass.h"

namespace magi {

class DeadCodeElimination : public GraphPass {
 public:
  static constexpr absl::string_view kName = "dce";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_DCE_H_
