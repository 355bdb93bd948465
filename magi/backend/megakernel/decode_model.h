// The decode step a MegaKernel runs: the shapes of a Llama-family decoder (RMSNorm, rotary
// attention with grouped-query heads over a KV cache, SwiGLU MLP, untied LM head) taking one
// new token for each of `batch` sequences. The instruction program (instruction_program.h)
// is built from it; docs/megakernel.md has the design. No LibTorch: it builds and tests on
// any machine.
#ifndef MAGI_BACKEND_MEGAKERNEL_DECODE_MODEL_H_
#define MAGI_BACKEND_MEGAKERNEL_DECODE_MODEL_H_

#include <cstdint>

#include "absl/status/status.h"

namespace magi::megakernel {

struct DecodeModel {
  int64_t batch = 1;       // sequences decoded per step, one token each
  int64_t dim = 0;         // model width
  int64_t n_layers = 0;
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads; divides n_heads (grouped-query attention)
  int64_t head_dim = 0;    // dim / n_heads; even (RoPE rotates halves)
  int64_t ffn_hidden = 0;  // SwiGLU width (gate and up rows)
  int64_t vocab = 0;       // LM head rows
  int64_t window = 0;      // KV cache positions per sequence
  int64_t weight_bytes_per_element = 2;  // bf16

  // Rows of the concatenated q, k, v projection.
  int64_t qkv_rows() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  // Query heads that read each kv head.
  int64_t group_size() const { return n_heads / n_kv_heads; }
  // Bytes of the weights one decode step reads (every matrix once, the norms' vectors).
  int64_t weight_bytes() const;

  // InvalidArgument naming the first inconsistent field (a zero size, heads that do not
  // divide, an odd head_dim, dim != n_heads * head_dim).
  absl::Status Validate() const;
};

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_DECODE_MODEL_H_
