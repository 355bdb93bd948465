// Facts about ops, declared once: which ops are views, random, effectful, matmul-like,
// elementwise, communication, data-dependent. Every pass, the cost model and the
// frontends ask this table instead of matching op names themselves (after XLA's
// HloOpcode traits and Glow's node definitions).
//
//   OpTraits traits = GetOpTraits(node.op());       // "aten::transpose.int" -> view of operand 0
//   if (traits.view) ...                             // shares operand traits.alias_operand's storage
//   if (!traits.movable()) ...                       // never reorder, merge or drop it
//
// An op is looked up by namespace and name without the overload ("aten::add" for
// "aten::add.Tensor"); one row (op_traits.cc) lists its facts. On top of the rows, two
// ATen naming conventions apply to every op, listed or not:
//  - a name ending in '_' (add_, copy_, _foreach_add_, bernoulli_) is in place: it
//    writes operand 0 and so has side effects. Dunder names (__and__) are not; the
//    in-place dunders (__iand__, ...) have rows.
//  - the overloads "out" and "out_*" (mm.out) write their out= argument: side effects.
// Ops without a row have no other traits: not a view (the memory planner gives their
// results storage of their own), not random, not matmul-like (the cost model uses the
// vector rate). Adding an op means adding its row, nothing else.
//
// What the table does not hold: shapes and type rules (the verifier's and LibTorch's
// job) and costs (magi/cost).
#ifndef MAGI_ANALYSIS_OP_TRAITS_H_
#define MAGI_ANALYSIS_OP_TRAITS_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace magi {

// "aten::add.Tensor" -> {"aten", "add", "Tensor"}; "relu" -> {"", "relu", ""}.
struct OpNameParts {
  absl::string_view ns;
  absl::string_view name;
  absl::string_view overload;
};
OpNameParts SplitOpName(absl::string_view op);

// What runs the op where it is matmul-like (the cost model counts its FLOPs at the
// device's matrix rate).
enum class MatmulKind : uint8_t {
  kNone,
  kMatmul,       // 2 * output elements * contraction length
  kConvolution,  // 2 * output elements * (weight elements per output channel)
  kAttention,    // QK^T and PV
};

struct OpTraits {
  bool known = false;           // the op has a row (else only the naming conventions applied)
  bool view = false;            // results share operand `alias_operand`'s storage; no data moves
  bool in_place = false;        // writes operand `alias_operand` (ATen's trailing '_')
  int alias_operand = -1;       // operand whose storage the results alias (views, in-place); -1: none
  bool side_effects = false;    // writes memory visible after it: in-place, out=, batch norm's running stats
  bool random = false;          // draws from the random generator: two runs differ
  bool data_dependent = false;  // its result is a number read out of tensor data (item, nonzero)
  bool elementwise = false;     // each output element from the same-index input elements (broadcasting)
  bool communication = false;   // a magi:: collective start or wait
  bool uninitialized = false;   // results hold memory nobody wrote (aten::empty and its kin)
  MatmulKind matmul = MatmulKind::kNone;
  bool backward = false;    // a backward op that produces two gradients (counts double in FLOPs)
  int matrix_operand = -1;  // matmul: operand whose last dim is contracted; -1: the first of rank >= 2

  bool matmul_like() const { return matmul != MatmulKind::kNone; }
  // May be reordered, merged with an equal node (CSE) or recomputed: no effects, no
  // randomness, no communication.
  bool movable() const { return !side_effects && !random && !communication; }
};

// The traits of `op` (a full op name, e.g. "aten::addmm.out"). Never fails: an unknown
// op gets only what the naming conventions say.
OpTraits GetOpTraits(absl::string_view op);

// Shorthand for GetOpTraits(op).view: the results alias operand 0's storage.
inline bool IsViewOp(absl::string_view op) { return GetOpTraits(op).view; }

// Donation (GraphOutput::aliases): the operand whose storage result `result` of `op` is
// written over in place when that operand is a donated graph input read for the last
// time there; -1 if none. magi::adamw writes p', m', v' over p, m, v (operands 0, 2, 3),
// magi::adamw_split hi', lo', m', v' over hi, lo, m, v (operands 0, 1, 3, 4);
// aten::scatter.src and aten::index_put write their result over `self` (operand 0) by
// running aten::scatter_.src and aten::index_put_ (a KV cache's update). The runtimes keep both
// promises (interpreter under RunDonating, nccl_stream with donate=true); an entry here
// is a promise every executor keeps, or the memory plan would be low.
int InPlaceOperandOfResult(absl::string_view op, int result);

}  // namespace magi

#endif  // MAGI_ANALYSIS_OP_TRAITS_H_
