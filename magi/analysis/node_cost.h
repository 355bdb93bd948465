// The cost question passes may ask: how long does one node take?
//
// Passes that trade time for memory (AutoRecompute) rank their choices by predicted
// time, but a pass must not depend on a particular cost model (magi/cost sits beside
// the passes, not below them). This interface is the seam: magi/cost's CostModel
// implements it, and tests may implement it with a table.
//
//   class Unit : public NodeCostOracle {
//     double NodeSeconds(const Node&) const override { return 1e-6; }
//   };
//   AutoRecompute pass(budget_bytes, Unit());
//
// It does not model overlap, streams or collectives' waiting (magi/cost/simulator.h
// does); it answers for one node in isolation and cannot fail.
#ifndef MAGI_ANALYSIS_NODE_COST_H_
#define MAGI_ANALYSIS_NODE_COST_H_

#include "magi/ir/node.h"

namespace magi {

class NodeCostOracle {
 public:
  virtual ~NodeCostOracle() = default;
  // Predicted time of `node` on its own, in seconds (>= 0); for a collective start the
  // whole collective, for a wait 0.
  virtual double NodeSeconds(const Node& node) const = 0;
};

}  // namespace magi

#endif  // MAGI_ANALYSIS_NODE_COST_H_
