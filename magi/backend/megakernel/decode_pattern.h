// Recognizes the decode step of a Llama-family model in a Magi graph: the graph Magi's own
// Llama (magi/models) gives FsdpInference's decode at world 1 after its default passes (the
// weights' all-gathers elided, q/k/v and gate/up concatenated by concat-matmuls). What the
// MegaKernel backend claims is exactly what this matches; anything else is declined with the
// node where the match failed and what was expected there, and runs on the other backends.
//
// Matched, per layer (bf16 or f32; `h` the hidden state [B, 1, dim]):
//   RMSNorm:   w * (h * rsqrt(mean(h^2, -1, keepdim) + eps))
//   q/k/v:     one mm with the concatenated weight, sliced into q (n_heads), k and v
//              (n_kv_heads each), viewed [B, heads, 1, head_dim]
//   RoPE:      x -> cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin) on the halves of q and k,
//              cos/sin rows of the model's rope buffers at the step's positions
//   cache:     index_put of k (rotated) and v into the donated caches [B, n_kv_heads, window,
//              head_dim] at the step's positions; with n_kv_heads < n_heads each kv head
//              repeated for its group (unsqueeze, expand, clone, view)
//   attention: SDPA (any of ATen's implementations) of q over the caches with the mask
//              "position <= the step's position", no dropout, not causal, default scale
//   residual:  h + o_proj(attention), then h + down(silu(gate) * up) with RMSNorm before
// then the final RMSNorm, the LM head (logits, a graph output) and argmax (the next token, a
// graph output). Sampling graphs are declined for now.
#ifndef MAGI_BACKEND_MEGAKERNEL_DECODE_PATTERN_H_
#define MAGI_BACKEND_MEGAKERNEL_DECODE_PATTERN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/megakernel/decode_model.h"
#include "magi/ir/graph.h"

namespace magi::megakernel {

// Where one layer's tensors are in the graph (graph inputs) and its norms' epsilons.
struct DecodeLayerBinding {
  const Value* attention_norm = nullptr;  // [dim]
  const Value* qkv_weight = nullptr;      // [(n_heads + 2 n_kv_heads) head_dim, dim]
  const Value* o_weight = nullptr;        // [dim, dim]
  const Value* ffn_norm = nullptr;        // [dim]
  const Value* gate_up_weight = nullptr;  // [2 ffn_hidden, dim]: gate rows, then up rows
  const Value* down_weight = nullptr;     // [dim, ffn_hidden]
  const Value* key_cache = nullptr;       // [batch, n_kv_heads, window, head_dim], donated
  const Value* value_cache = nullptr;
  double attention_eps = 0, ffn_eps = 0;
};

struct DecodeGraphMatch {
  DecodeModel model;
  const Value* tokens = nullptr;     // i64[batch, 1]
  const Value* positions = nullptr;  // i64[batch]: each sequence's position this step
  const Value* rope_cos = nullptr;   // [positions, head_dim / 2] buffers
  const Value* rope_sin = nullptr;
  const Value* embedding = nullptr;  // [vocab, dim]
  std::vector<DecodeLayerBinding> layers;
  const Value* final_norm = nullptr;
  double final_eps = 0;
  const Value* lm_head = nullptr;    // [vocab, dim]
  const Value* logits = nullptr;     // the graph output [batch, 1, vocab]
  const Value* next_token = nullptr; // the graph output i64[batch]
};

// The match, or Unimplemented naming the value where the graph stops being a Llama decode
// step and what was expected there ("at %mul_24: expected aten::mul.Tensor by a [64]
// parameter (RMSNorm's weight)").
absl::StatusOr<DecodeGraphMatch> MatchDecodeGraph(const Graph& graph);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_DECODE_PATTERN_H_
