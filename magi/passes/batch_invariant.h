// Batch-invariant unrolling: every sequence of a batch computes exactly what it would
// compute alone, whatever the batch size and whatever the other sequences are.
//
// Why: a kernel's reduction order, vector/scalar split or algorithm can depend on the
// shape it is given (cuBLAS and MKL pick GEMM kernels and split-K by M; ATen's CPU
// vectorized loops compute the last numel % 16 elements of a tensor on a scalar path
// with other rounding, e.g. silu's exp; a parallel_for splits at numel / threads). So
// row b of a [B, ...] op need not be bitwise row b of the same op on [1, ...]. This
// pass removes the dependence at the graph level instead of rewriting kernels: given
// a graph captured for ONE sequence (every data input has dim 0 == 1), it makes the
// graph take `batch` sequences and run each sequence's part of the graph as its own
// copy on tensors of the one-sequence shapes, so every kernel sees exactly the shapes
// (and so the splits) of a one-sequence run.
//
//   magi opt fwd.mir --passes='batch-invariant{batch=2}'
//   before:  input %x: f32[1,3,4]
//            %h = aten::matmul(%x, %wt) : f32[1,3,4]
//            %y = aten::silu(%h) : f32[1,3,4]
//            output y = %y
//   after:   input %x: f32[2,3,4]
//            %x.seq0.2 = aten::slice.Tensor(%x, 0, 0, 1, 1) : f32[1,3,4]
//            %h.3 = aten::matmul(%x.seq0.2, %wt) : f32[1,3,4]
//            %x.seq1.4 = aten::slice.Tensor(%x, 0, 1, 2, 1) : f32[1,3,4]
//            %h.5 = aten::matmul(%x.seq1.4, %wt) : f32[1,3,4]
//            %y.6 = aten::silu(%h.3) : f32[1,3,4]
//            %y.7 = aten::silu(%h.5) : f32[1,3,4]
//            %y.batched.8 = aten::cat([%y.6, %y.7], 0) : f32[2,3,4]
//            output y = %y.batched.8
//
// What it does: a node is data-dependent if it reads a data input (InputRole::kData)
// or a data-dependent value. Each data-dependent node is copied `batch` times in place
// (node-major: all sequences of one node, then the next node, so an FSDP forward keeps
// its layer-by-layer all-gather structure and memory profile); copy b reads sequence
// b's row of each data input (a view, aten::slice.Tensor on dim 0). Nodes that do not
// depend on data (parameter all-gathers, buffers, masks, constants) stay once and are
// shared by all sequences. Outputs that depend on data are the sequences' results
// concatenated on dim 0 (aten::cat, a copy: bitwise). Data inputs keep their names and
// their place in the input list; dim 0 becomes `batch`. An output that aliases an input
// (donation) still aliases it; a concatenated output is not written in place, but the
// donated input is still freed after its last read. Registered as
// "batch-invariant{batch=N}"; batch=1 changes nothing.
//
// What it does NOT do: it does not make a kernel deterministic run to run (that is the
// runtime's deterministic settings: magi/runtime/deterministic), and it does not keep
// the batched kernels' speed: B copies of each op on one sequence each (the cost is
// measured in docs/deterministic.md). It refuses (InvalidArgument naming the graph and
// the value or node) graphs it cannot unroll faithfully: a data input whose dim 0 is
// not 1, a data-dependent output without dim 0 == 1 (a loss is not per sequence),
// data-dependent nodes that draw random numbers or have side effects (B copies would
// draw or write B times).
#ifndef MAGI_PASSES_BATCH_INVARIANT_H_
#define MAGI_PASSES_BATCH_INVARIANT_H_

#include <cstdint>

#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

struct BatchInvariantOptions : PassOptions<BatchInvariantOptions> {
  int64_t batch = 0;  // the number of sequences the unrolled graphs take (>= 1; required)

  static const OptionSchema<BatchInvariantOptions>& Schema();
};

class BatchInvariant : public GraphPass {
 public:
  using Options = BatchInvariantOptions;
  static constexpr absl::string_view kName = "batch-invariant";

  explicit BatchInvariant(Options options) : options_(options) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }
  int64_t batch() const { return options_.batch; }

 protected:
  // Unrolls `graph` if it has data inputs; a graph without any stays.
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_BATCH_INVARIANT_H_
