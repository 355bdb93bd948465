// Magi's own compute ops (besides the collectives of collectives.h) and their builders.
//
// magi::call runs another graph of the same module, which the compiler outlined for a
// partition backend (magi/compiler/partitioner.h):
//
//   %y, %z = magi::call([%a, %b], callee = "train_step.elementwise.0") : f32[8,16], f32[8,16]
//
// It takes one tensor list, the callee's inputs in order, and returns the callee's
// outputs in order; the types must match exactly (the verifier checks it).
//
// magi::adamw is one AdamW update of one parameter shard, functionally (new values out):
//
//   %p2, %m2, %v2 = magi::adamw(%p, %g, %m, %v, %decay, %step_size, %bc2_sqrt,
//                               beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[..], f32[..], f32[..]
//
// with p, g, m, v of one type and decay (1 - lr * weight_decay), step_size
// (lr / (1 - beta1^t)) and bc2_sqrt (sqrt(1 - beta2^t)) 0-dim tensors, computing LibTorch's
// AdamW:  p' = p * decay - step_size * m' / (sqrt(v') / bc2_sqrt + eps),
//         m' = beta1 * m + (1 - beta1) * g,   v' = beta2 * v + (1 - beta2) * g * g.
// Backends may run many of them as one multi-tensor kernel, and in place when the caller
// donates p, m and v (see TorchExecutable).
//
// magi::adamw_split is magi::adamw on a master weight held split (split-master-weights,
// magi/passes/split_master_weights.h; the numerics in magi/backend/common/split_float.h):
//
//   %hi2, %lo2, %m2, %v2 = magi::adamw_split(%hi, %lo, %g, %m, %v, %decay, %step_size, %bc2_sqrt,
//                                            beta1 = 0.9, beta2 = 0.999, eps = 1e-08)
//                          : bf16[..], i16[..], f32[..], f32[..]
//
// with hi (bf16) and lo (i16) the halves of the fp32 parameter p = JoinSplit(hi, lo), and
// g, m, v fp32 of the same sizes: it computes magi::adamw's p', m', v' and returns
// SplitToBf16(p') as hi', lo'. The update is magi::adamw's except where p' is an exact bf16
// tie (p' then moves one fp32 ulp toward its bf16; hi' is the bf16 cast of p' either way).
//
// magi::local_shard is the calling rank's part of a tensor that every rank of a process
// group holds whole (FSDP2's reshard_after_forward=<int> keeps it of the gathered
// parameters between forward and backward):
//
//   %w.piece = magi::local_shard(%w.gathered, group = "dp.post_forward2") : f32[32,16]
//
// dim 0 is cut into `size` equal pieces (size = the group's) and rank r of the group takes
// rows [r * n / size, (r + 1) * n / size). The result is a fresh tensor, not a view, so the
// whole one can be freed; an all-gather over the same group puts the whole back together.
// It communicates nothing: the executor reads r off the communicator bound to the group.
// The graph stays the same on every rank (only the bound communicators differ).
#ifndef MAGI_IR_MAGI_OPS_H_
#define MAGI_IR_MAGI_OPS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

inline constexpr absl::string_view kCallOp = "magi::call";
inline constexpr absl::string_view kAdamWOp = "magi::adamw";
inline constexpr absl::string_view kAdamWSplitOp = "magi::adamw_split";
inline constexpr absl::string_view kLocalShardOp = "magi::local_shard";

// Inserts before `before` (appends when null) a call of `callee` (a graph of the same
// module) on `inputs`; results get the callee's output types and `result_names`.
absl::StatusOr<Node*> AddCall(Graph& graph, const Graph& callee, const std::vector<Value*>& inputs,
                              Node* before = nullptr, std::vector<std::string> result_names = {});
// The callee graph name of a magi::call node ("" if malformed).
std::string CalleeName(const Node& call);

struct AdamWConstants {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Indices of magi::adamw's operands.
enum AdamWOperand { kAdamWParam, kAdamWGrad, kAdamWExpAvg, kAdamWExpAvgSq, kAdamWDecay, kAdamWStepSize, kAdamWBc2Sqrt };

// Inserts a magi::adamw node before `before` (appends when null); results are named
// after `name` (name.next, name.exp_avg.next, name.exp_avg_sq.next).
absl::StatusOr<Node*> AddAdamW(Graph& graph, Value* param, Value* grad, Value* exp_avg, Value* exp_avg_sq,
                               Value* decay, Value* step_size, Value* bc2_sqrt, const AdamWConstants& constants,
                               const std::string& name, Node* before = nullptr);
// The constants of a magi::adamw or magi::adamw_split node (defaults where an argument is
// missing).
AdamWConstants AdamWConstantsOf(const Node& adamw);

// Indices of magi::adamw_split's operands.
enum AdamWSplitOperand {
  kAdamWSplitHi,
  kAdamWSplitLo,
  kAdamWSplitGrad,
  kAdamWSplitExpAvg,
  kAdamWSplitExpAvgSq,
  kAdamWSplitDecay,
  kAdamWSplitStepSize,
  kAdamWSplitBc2Sqrt
};

// Inserts before `before` (appends when null) the magi::adamw_split of the split
// parameter (hi, lo) that `adamw` (a magi::adamw of the joined parameter) updates, with
// its grad, moments, scalars and constants; results are named after `name` (name.hi.next,
// name.lo.next, name.exp_avg.next, name.exp_avg_sq.next). InvalidArgument when hi is not
// bf16, lo not i16 of the same sizes, or `adamw` not a magi::adamw of that shape.
absl::StatusOr<Node*> AddAdamWSplit(Graph& graph, Value* hi, Value* lo, const Node& adamw, const std::string& name,
                                    Node* before = nullptr);

// Both AdamW forms, for code that treats them alike (runtimes, the stream plan): whether
// `node` is a magi::adamw or magi::adamw_split, and the index of the operand that
// magi::adamw has at `k` (AdamWOperand). For magi::adamw_split the parameter
// (k = kAdamWParam) is its high half: the low half follows it, at kAdamWSplitLo (results
// likewise: hi', lo', m', v').
inline bool IsAdamW(const Node& node) { return node.op() == kAdamWOp || node.op() == kAdamWSplitOp; }
inline bool IsAdamWSplit(const Node& node) { return node.op() == kAdamWSplitOp; }
inline int AdamWOperandIndex(bool split, int k) { return split && k > kAdamWParam ? k + 1 : k; }
inline int AdamWOperandIndex(const Node& node, int k) { return AdamWOperandIndex(IsAdamWSplit(node), k); }
// The operands an AdamW node updates (parameter, or its halves, and the two moments).
inline std::vector<int> AdamWStateOperands(const Node& node) {
  if (IsAdamWSplit(node)) return {kAdamWSplitHi, kAdamWSplitLo, kAdamWSplitExpAvg, kAdamWSplitExpAvgSq};
  return {kAdamWParam, kAdamWExpAvg, kAdamWExpAvgSq};
}

// The type of magi::local_shard of `whole` over a group of `group_size` ranks (dim 0
// divided); InvalidArgument when `whole` has no static dim 0 divisible by it.
absl::StatusOr<TensorType> LocalShardType(const TensorType& whole, int64_t group_size);
// Inserts before `before` (appends when null) this rank's piece of `whole` among `group`.
absl::StatusOr<Node*> AddLocalShard(Graph& graph, Value* whole, const ProcessGroup& group, const std::string& name,
                                    Node* before = nullptr);

}  // namespace magi

#endif  // MAGI_IR_MAGI_OPS_H_
