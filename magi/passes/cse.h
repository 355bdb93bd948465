// Common subexpression elimination.
//
// Two nodes are the same computation when they have the same op, the same argument list
// (the same constants and the very same operand values) and the same result types; the
// later one's results are replaced by the earlier one's and it is erased. Registered as
// "cse". It does NOT merge (magi/analysis/op_traits.h says which ops these are): ops
// with side effects (in-place / out=), random ops (their repeats draw new numbers:
// bernoulli, dropout, rand*, normal, multinomial, randperm, uniform, exponential...),
// collectives (each start/wait pair is a communication of its own), or nodes with no
// results. Annotations of the kept node win.
#ifndef MAGI_PASSES_CSE_H_
#define MAGI_PASSES_CSE_H_

#include "magi/passes/pass.h"

namespace magi {

class CommonSubexpressionElimination : public GraphPass {
 public:
  static constexpr absl::string_view kName = "cse";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_CSE_H_
