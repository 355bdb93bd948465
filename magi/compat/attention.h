// Scaled-dot-product attention across LibTorch versions: the fused
// at::scaled_dot_product_attention on 2.x (CI tests 2.11 and 2.12; on the CPU it runs
// _scaled_dot_product_flash_attention_for_cpu), matmul + masked softmax on 1.13 (which
// has no SDPA). q: [batch, heads, queries, head_dim]; k, v: [batch, heads, keys, head_dim].
// CausalAttention masks the future (queries == keys); MaskedAttention takes the mask
// (the KV-cache decode step: a query attends to the cache positions up to its own).
// attention_test checks both against the definition and which op ran.
#ifndef MAGI_COMPAT_ATTENTION_H_
#define MAGI_COMPAT_ATTENTION_H_

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "magi/compat/torch_compat.h"

namespace magi::compat {

inline at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  int64_t seq = q.size(-2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  at::Tensor mask = at::ones({seq, seq}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

// `visible`: bool, broadcastable to [batch, heads, queries, keys]; true where the query
// may attend to the key. Every query must see at least one key (else its row is NaN,
// as in PyTorch). A masked key contributes exactly 0 (its probability is exp(-inf)).
inline at::Tensor MaskedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& visible) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, visible, /*dropout_p=*/0.0, /*is_causal=*/false);
#else
  // The same op sequence as CausalAttention above, so a full-window mask gives its bits.
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

}  // namespace magi::compat

#endif  // MAGI_COMPAT_ATTENTION_H_
