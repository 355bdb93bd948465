// Scaled-dot-product attention across LibTorch versions: the fused
// at::scaled_dot_product_attention on 2.x (CI tests 2.11 and 2.12; on the CPU it runs
// _scaled_dot_product_flash_attention_for_cpu), matmul + masked softmax on 1.13 (which
// has no SDPA). q: [batch, heads, queries, head_dim]; k, v: [batch, heads, keys, head_dim].
// CausalAttention masks the future (queries == keys); MaskedAttention takes the mask
// (the KV-cache decode step: a query attends to the cache positions up to its own).
// attention_test checks both against the definition and which op ran.
//
// On the meta device (a model captured there for a step that runs elsewhere) PyTorch's
// SDPA cannot see the target: its backend choice on meta is the math form, which keeps the
// [batch, heads, queries, keys] probabilities for backward (in fp32 for bf16 inputs, 537 MB
// per layer of the 8B step at 2,048 tokens) where a CUDA step runs a fused kernel keeping
// O(queries) (flash attention: the logsumexp). So whole-step capture names the target
// (ScopedMetaAttentionDevice) and, for CUDA (fp16/bf16), CausalAttention on meta calls the
// fused kernel the GPU would run, cuDNN's or flash attention, whose meta kernels (forward
// and backward, which C++ LibTorch lacks: PyTorch registers them from Python) torch_compat.cc
// adds.
#ifndef MAGI_COMPAT_ATTENTION_H_
#define MAGI_COMPAT_ATTENTION_H_

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "magi/compat/torch_compat.h"

namespace magi::compat {

// The device that attention on meta tensors computes for, on this thread (kMeta: none
// named, PyTorch's own choice). Set for the scope of a capture.
at::Device MetaAttentionDevice();

class ScopedMetaAttentionDevice {
 public:
  explicit ScopedMetaAttentionDevice(at::Device device);
  ~ScopedMetaAttentionDevice();
  ScopedMetaAttentionDevice(const ScopedMetaAttentionDevice&) = delete;
  ScopedMetaAttentionDevice& operator=(const ScopedMetaAttentionDevice&) = delete;

 private:
  at::Device previous_;
};

// For its scope, scaled_dot_product_attention chooses its math form (matmul, masked softmax,
// matmul: what whole-step capture then records as ordinary ops) instead of a fused kernel
// (flash, memory-efficient, cuDNN): gpt-fast's choice for decode, where one query per sequence
// leaves a fused attention kernel little to do and a compiler can fuse the math form with its
// neighbours. Process-wide (ATen's SDPA flags are global): for a capture, not for concurrent
// work. On LibTorch 1.13 (no SDPA) it does nothing.
class ScopedMathAttention {
 public:
  ScopedMathAttention();
  ~ScopedMathAttention();
  ScopedMathAttention(const ScopedMathAttention&) = delete;
  ScopedMathAttention& operator=(const ScopedMathAttention&) = delete;

 private:
  bool flash_ = false, memory_efficient_ = false, cudnn_ = false, overrideable_ = false;
};

#if TORCH_VERSION_MAJOR >= 2
// Causal attention on meta for a CUDA step (MetaAttentionDevice()): the fused kernel the GPU
// would run, whose meta kernels torch_compat.cc registers where LibTorch lacks them. On a
// machine with that GPU the kernel is the one PyTorch chooses there for these shapes
// (at::_fused_sdp_choice on empty tensors of the same geometry on that device: cuDNN's on
// the H200 with 2.11); without one (planning on a CPU machine), flash attention (the same
// memory: both keep an fp32 logsumexp). Returns an undefined tensor where neither applies
// (fp32; PyTorch choosing memory-efficient or math attention on the GPU): the caller keeps
// PyTorch's own choice on meta.
at::Tensor FusedCausalAttentionOnMetaForCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
#endif

inline at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_meta() && MetaAttentionDevice().is_cuda()) {
    at::Tensor fused = FusedCausalAttentionOnMetaForCuda(q, k, v);
    if (fused.defined()) return fused;
  }
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
