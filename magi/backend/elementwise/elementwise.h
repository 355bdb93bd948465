// "elementwise": the example partition backend of docs/backends.md. It takes runs of
// float32 elementwise arithmetic on the CPU and runs each run as ONE fused loop over
// memory (the interpreter makes one pass, and one temporary, per op).
//
// Capability: add/sub/mul/div (Tensor and Scalar overloads, add/sub with alpha), neg and
// relu, whose operands and results are contiguous float32 CPU tensors of one shape, or
// 0-dim tensors (broadcast as scalars). Everything else it declines, with the reason.
//
// Compile turns the partition into a register program (one register per value) and Run
// evaluates it block by block (kBlock elements at a time, blocks in parallel through
// at::parallel_for), writing only the partition's outputs. Results match the interpreter
// bitwise for add/sub/mul/div/neg/relu with alpha 1; with another alpha it uses a fused
// multiply-add, as ATen's vectorized CPU kernels do (the same to within one rounding).
// What it does NOT do: broadcasting other than 0-dim operands, other dtypes or devices,
// type promotion.
#ifndef MAGI_BACKEND_ELEMENTWISE_ELEMENTWISE_H_
#define MAGI_BACKEND_ELEMENTWISE_ELEMENTWISE_H_

#include "magi/backend/backend.h"

namespace magi {

class ElementwiseBackend : public Backend {
 public:
  absl::string_view name() const override { return "elementwise"; }
  Capability GetCapability(const Module& module, const Graph& graph) const override;
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                      const CompileContext& context) const override;
};

}  // namespace magi

#endif  // MAGI_BACKEND_ELEMENTWISE_ELEMENTWISE_H_
