// Hoist weight preparation: the work of a step that depends only on its weights moves to
// a graph of its own, which the caller runs once per weight change instead of every step.
//
// A weight is a graph input of role param or buffer that the step does not update (no
// output is named after it or "<name>.updated", none aliases it). A node is weight
// preparation when every operand is a weight or weight preparation, it has at least one
// operand, and it may be moved (OpTraits::movable(): no side effects, randomness or
// communication) and is no magi::call. View ops are moved only where moved nodes read
// them: a view the step reads stays in the step (it costs nothing there, and the
// prepared tensors the step takes are then never views of the weights).
//
//   graph @step  -> graph @step.prep: inputs the weights it reads, outputs the prepared
//                   values the step reads (named after the values), nodes in program order;
//                   graph @step: each such value becomes an input of role param of the
//                   same name ("wq.weight.shard.concat" for concat-matmuls' concatenation,
//                   concat_matmuls.h), and weight inputs nothing reads any more are removed.
//
// The caller runs @step.prep after every change of the weights and binds its outputs to
// the step's inputs of those names (FsdpInference does, with CompileOptions::optimization.
// weight_preparation). A training step, whose parameters change every step, has nothing to
// hoist from them (they are outputs) and should not ask for it.
//
// It does NOT hoist nodes that read only constants (no operand), views the step reads, or
// anything from graphs named "*.prep" or called through magi::call (their inputs are fixed
// by the caller). Registered as "hoist-weight-preparation" (every other graph of the module,
// no options); the compile driver calls HoistWeightPreparation for its step.
#ifndef MAGI_PASSES_HOIST_WEIGHT_PREPARATION_H_
#define MAGI_PASSES_HOIST_WEIGHT_PREPARATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "magi/ir/module.h"
#include "magi/passes/pass.h"

namespace magi {

// The name of the graph holding `graph_name`'s weight preparation: "<graph_name>.prep".
std::string WeightPreparationGraphName(const std::string& graph_name);

// Moves the weight preparation of `module`'s graph `graph_name` into a new graph
// WeightPreparationGraphName(graph_name) (see above). Returns its name, or "" when there
// is nothing to hoist (no graph is added). NotFound without such a graph;
// FailedPrecondition when the preparation graph exists already.
absl::StatusOr<std::string> HoistWeightPreparation(Module& module, const std::string& graph_name);

class HoistWeightPreparationPass : public Pass {
 public:
  static constexpr absl::string_view kName = "hoist-weight-preparation";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_HOIST_WEIGHT_PREPARATION_H_
