// Checks the invariants every pass may rely on.
//
// What it checks:
//  - SSA: every operand is a graph input or a result of an earlier node (program
//    order is a valid schedule); outputs are values of the graph; names are unique.
//  - Sizes: every value's element and byte counts fit in int64.
//  - Argument lists: every operand is referenced by exactly one argument.
//  - Known ops: arity and result count of common ATen ops, shapes of matrix
//    products, and that the magi:: namespace holds only Magi's ops.
//  - Collectives: each start has a group that exists in the module, a valid
//    reduce_op where it takes one, futures of the right types, and exactly one
//    magi::wait that consumes all of its futures in order; futures flow nowhere else.
// What it does not check: the types of ATen ops it does not know (LibTorch checks
// those when the graph runs).
//
// Errors are InvalidArgument; each problem is a line naming the graph, the node (op,
// first result, text location, module path) and the reason. At most 20 are listed.
#ifndef MAGI_IR_VERIFIER_H_
#define MAGI_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

absl::Status VerifyModule(const Module& module);
// Verifies one graph; `module` resolves process groups and may be null when the graph
// has no collectives.
absl::Status VerifyGraph(const Graph& graph, const Module* module);

}  // namespace magi

#endif  // MAGI_IR_VERIFIER_H_
