// Concat matmuls: linears that read the same activation become one matmul against their
// weights concatenated (attention's q/k/v projections, the MLP's gate and up), so a decode
// step launches one GEMM per group and reads the group's weights in one pass.
//
// A part is `aten::mm(A_i, aten::t(W_i))` whose W_i is a parameter: a role=param graph
// input P_i, or P_i.shard gathered by an all-gather (result i of a magi::wait whose
// magi::all_gather_start read the role=param input P_i.shard at index i, or
// `aten::_to_copy(P_i.shard)`, mixed precision's cast before the gather). A group is two or
// more parts whose A_i are one value, or equal chains of view ops on one value (the
// per-linear `_reshape_alias` capture records), whose W_i are rank-2 of one dtype, device
// and column count K, cast alike, and that come from the same all-gather (or all
// ungathered). With S
// the sum of the parts' rows s_i per rank, the group becomes:
//
//   %P1.shard.concat = aten::cat([%P1.shard, %P2.shard, ...], 0) : [S, K]   (reads only parameters;
//                      cast parts: the cat is %P1.shard.concat.f32 and one _to_copy of it this)
//   ... the same all-gather, with the concatenation in place of the parts' shards ...
//   %w = magi::wait(...)                                          : [w*S, K]
//   %y = aten::mm(%A_1, aten::t(%w))                              : [M, w*S]
//
// then per part its columns: the gathered rows are rank by rank [P1's s_1 rows, P2's s_2
// rows, ...], so at world w > 1 `view [M, w, S]`, `slice` dim 2 [off_i, off_i + s_i), a
// contiguous `clone`, `view [M, w*s_i]`; at world 1 (or ungathered) a `slice` of dim 1 and
// a contiguous `clone`. The copies keep every part's result the contiguous tensor its users
// were captured with; the values are the separate matmuls' up to the GEMM's summation order
// (one GEMM with more columns may block the contraction differently).
//
// The concatenation reads only parameters: with CompileOptions::optimization.
// weight_preparation the driver computes it once per weight change
// (hoist_weight_preparation.h) instead of every step.
//
// It does NOT rewrite:
//  - a part whose gathered weight (or its transpose) has any other reader, or is a graph
//    output: the separate gather would still be needed, so concatenating saves nothing
//    (a training step's backward reads the gathered weights again: training is left as it is);
//  - parameters whose dim 0 the world size does not divide: FSDP pads their shards and
//    slices the gathered tensor back, so the transpose does not read the wait's result and
//    the part is not matched (padding would put zero rows inside the concatenation);
//  - matmuls other than aten::mm with a transposed weight (addmm with a bias, bmm), dynamic
//    sizes, a weight appearing twice in one group.
// The parts' matmuls, transposes, the replaced all-gather and the view chains left unread
// are erased. Registered as "concat-matmuls"; no options.
#ifndef MAGI_PASSES_CONCAT_MATMULS_H_
#define MAGI_PASSES_CONCAT_MATMULS_H_

#include "magi/passes/pass.h"

namespace magi {

class ConcatMatmuls : public GraphPass {
 public:
  static constexpr absl::string_view kName = "concat-matmuls";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_CONCAT_MATMULS_H_
