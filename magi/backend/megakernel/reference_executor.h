// Runs a MegaKernel instruction program on the CPU with ATen, one instruction at a time, in any
// order the program's waits allow: what each instruction computes, written once, as the
// reference the CUDA kernel is held to and the proof, against the graph it was matched from
// (reference_executor_test), that the tiles, the fused norms and RoPE, the cache writes and the
// attention per kv group compute the decode step.
#ifndef MAGI_BACKEND_MEGAKERNEL_REFERENCE_EXECUTOR_H_
#define MAGI_BACKEND_MEGAKERNEL_REFERENCE_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/instruction_program.h"

namespace magi::megakernel {

// The tensors of a matched decode graph, taken from its inputs.
struct DecodeTensors {
  struct Layer {
    at::Tensor attention_norm, qkv, o, ffn_norm, gate_up, down;
    at::Tensor key_cache, value_cache;  // updated in place by the step
    double attention_eps = 0, ffn_eps = 0;
  };
  at::Tensor tokens, positions, rope_cos, rope_sin, embedding, final_norm, lm_head;
  double final_eps = 0;
  std::vector<Layer> layers;
};

// The tensors `match` binds, from `inputs` in `graph`'s input order (the caches are the
// caller's tensors: a run writes the step's keys and values into them).
absl::StatusOr<DecodeTensors> BindDecodeTensors(const DecodeGraphMatch& match, const Graph& graph,
                                                const std::vector<at::Tensor>& inputs);

struct ReferenceResult {
  at::Tensor logits;      // [batch, 1, vocab], as the graph's logits output
  at::Tensor next_token;  // [batch]
  std::vector<int> order;  // the instructions in the order they ran
};

// Runs `program` on `tensors`: with `order_seed` 0 in the sequential order; otherwise each
// next instruction is that of an SM picked at random (seeded) among those whose next
// instruction's waits are met, as SMs running at any relative speed would.
absl::StatusOr<ReferenceResult> RunReference(const Program& program, DecodeTensors& tensors, uint64_t order_seed = 0);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_REFERENCE_EXECUTOR_H_
