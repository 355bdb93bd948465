// Slice gradients to cat: rewrites the backward of "split a tensor in two along a dim"
// (rotary embeddings' rotate_half, chunk) from zero-padded halves added together into
// one concatenation.
//
// Autograd differentiates `x[..., :h]` and `x[..., h:]` into two aten::slice_backward
// (each a zero-filled buffer of x's full size with one half copied in) whose sum is the
// gradient of x:
//   %lo = aten::slice_backward(%a, sizes, d, 0, h, 1)
//   %hi = aten::slice_backward(%b, sizes, d, h, n, 1)
//   %g = aten::add.Tensor(%lo, %hi, alpha = 1)      (either order)
// which is `aten::cat([%a, %b], d)`: on the 953M Llama step (RoPE on q and k, 32 per step)
// the three kernels move ~7 full tensors of memory, the cat 2. Every element of %g is
// one of %a's or %b's plus an exact zero, so the values are equal (a -0.0 in %a or %b stays
// -0.0 where the add made it +0.0).
//
// It does NOT rewrite slices with a step other than 1, ranges that do not tile the dim,
// slice_backward results that something else also reads, or an add whose result type is
// not the cat's (dtype, sizes, contiguous strides). Registered as "slice-grads-to-cat".
#ifndef MAGI_PASSES_SLICE_GRADS_TO_CAT_H_
#define MAGI_PASSES_SLICE_GRADS_TO_CAT_H_

#include "magi/passes/pass.h"

namespace magi {

class SliceGradsToCat : public GraphPass {
 public:
  static constexpr absl::string_view kName = "slice-grads-to-cat";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_SLICE_GRADS_TO_CAT_H_
