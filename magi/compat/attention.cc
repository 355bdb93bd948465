#include "magi/compat/attention.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace magi::compat {
namespace {

thread_local at::DeviceType g_meta_attention_device = at::kMeta;

#if TORCH_VERSION_MAJOR >= 2
using FusedAttentionOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
                                at::Tensor, at::Tensor>;

// What the CUDA kernel returns, in shape, dtype and layout (PyTorch's Python meta
// registration of the op, torch/_meta_registrations.py, describes the same): the output
// in the query's layout (the kernel computes [batch, queries, heads, head_dim] and
// transposes back), the fp32 logsumexp [batch, heads, queries], no cumulative sequence
// lengths (dense batch), the rng state as uint64 [2] and an unused uint64 scalar, and an
// empty debug mask.
FusedAttentionOutputs FlashAttentionMeta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& /*value*/,
                                         double /*dropout_p*/, bool /*is_causal*/, bool return_debug_mask,
                                         std::optional<double> /*scale*/) {
  TORCH_CHECK(!return_debug_mask, "magi's meta kernel of _scaled_dot_product_flash_attention has no debug mask");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4, "_scaled_dot_product_flash_attention: 4-D query and key expected");
  const at::TensorOptions meta = query.options().device(at::kMeta);
  at::Tensor attention = at::empty_like(query);
  at::Tensor logsumexp = at::empty({query.size(0), query.size(1), query.size(2)}, meta.dtype(at::kFloat));
  at::Tensor rng_state = at::empty({2}, meta.dtype(at::kUInt64));
  at::Tensor unused = at::empty({}, meta.dtype(at::kUInt64));
  at::Tensor debug_mask = at::empty({0}, meta);
  return {attention, logsumexp, at::Tensor(), at::Tensor(), c10::SymInt(query.size(2)), c10::SymInt(key.size(2)),
          rng_state, unused, debug_mask};
}

// The gradients in the layouts of query, key and value (the CUDA kernel's, as above).
std::tuple<at::Tensor, at::Tensor, at::Tensor> FlashAttentionBackwardMeta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/,
    bool /*is_causal*/, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> /*scale*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

// cuDNN attention's output: the shape [batch, heads, queries, value head_dim] in the query's
// dimension order (PyTorch's alloc_with_matching_layout).
at::Tensor LikeQueryLayout(const at::Tensor& query, at::IntArrayRef shape) {
  if (query.sizes() == shape) return at::empty_like(query);
  std::vector<int64_t> order = {0, 1, 2, 3};  // dimensions from the largest stride down
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> permuted_shape, back(4);
  for (size_t i = 0; i < order.size(); ++i) {
    permuted_shape.push_back(shape[order[i]]);
    back[order[i]] = static_cast<int64_t>(i);
  }
  return at::empty(permuted_shape, query.options()).permute(back);
}

// What the CUDA kernel returns (PyTorch's Python meta registration): the output in the
// query's layout, the fp32 logsumexp [batch, heads, queries, 1], int64 scalar rng seed and
// offset, no cumulative lengths or debug mask.
FusedAttentionOutputs CudnnAttentionMeta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                         const std::optional<at::Tensor>& /*attn_bias*/, bool /*compute_log_sumexp*/,
                                         double /*dropout_p*/, bool /*is_causal*/, bool /*return_debug_mask*/,
                                         std::optional<double> /*scale*/) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "_scaled_dot_product_cudnn_attention: 4-D query, key and value expected");
  const at::TensorOptions meta = query.options().device(at::kMeta);
  at::Tensor output = LikeQueryLayout(query, {query.size(0), query.size(1), query.size(2), value.size(-1)});
  at::Tensor logsumexp = at::empty({query.size(0), query.size(1), query.size(2), 1}, meta.dtype(at::kFloat));
  return {output,
          logsumexp,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(query.size(2)),
          c10::SymInt(key.size(2)),
          at::empty({}, meta.dtype(at::kLong)),
          at::empty({}, meta.dtype(at::kLong)),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> CudnnAttentionBackwardMeta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, const at::Tensor& /*attn_bias*/, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/,
    bool /*is_causal*/, std::optional<double> /*scale*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

bool HasMetaKernel(const char* op) {
  auto handle = c10::Dispatcher::singleton().findSchema({op, ""});
  return handle.has_value() && handle->hasKernelForDispatchKey(c10::DispatchKey::Meta);
}

// Meta kernels for the fused CUDA attention ops, where LibTorch has none (once, for the
// process's life: a torch::Library deregisters its kernels when destroyed).
void RegisterFusedAttentionMetaKernels() {
  static std::once_flag once;
  static std::unique_ptr<torch::Library> library;
  std::call_once(once, [] {
    library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__,
                                               __LINE__);
    if (!HasMetaKernel("aten::_scaled_dot_product_flash_attention")) {
      library->impl("_scaled_dot_product_flash_attention", TORCH_FN(FlashAttentionMeta));
    }
    if (!HasMetaKernel("aten::_scaled_dot_product_flash_attention_backward")) {
      library->impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(FlashAttentionBackwardMeta));
    }
    if (!HasMetaKernel("aten::_scaled_dot_product_cudnn_attention")) {
      library->impl("_scaled_dot_product_cudnn_attention", TORCH_FN(CudnnAttentionMeta));
    }
    if (!HasMetaKernel("aten::_scaled_dot_product_cudnn_attention_backward")) {
      library->impl("_scaled_dot_product_cudnn_attention_backward", TORCH_FN(CudnnAttentionBackwardMeta));
    }
  });
}

// PyTorch's SDPBackend numbering (aten/src/ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kSdpFlash = 1;
constexpr int64_t kSdpCudnn = 3;

bool FlashOrCudnnTakes(const at::Tensor& q) {
  const int64_t head_dim = q.size(-1);
  return q.dim() == 4 && (q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16) && head_dim % 8 == 0 &&
         head_dim <= 256;
}

// The backend PyTorch picks on this machine's GPU for attention of this geometry, or
// kSdpFlash without a GPU. Cached: capture asks once per layer with the same shapes.
int64_t CudaAttentionChoice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, int64_t> chosen;
  std::vector<int64_t> key = {static_cast<int64_t>(q.scalar_type()), q.requires_grad() || k.requires_grad() ||
                                                                         v.requires_grad()};
  for (const at::Tensor& t : {q, k, v}) {
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto it = chosen.find(key);
  if (it != chosen.end()) return it->second;
  int64_t choice = kSdpFlash;
  if (at::hasCUDA()) {
    // Probing tensors, not the step's: kept out of a capture that may be running.
    c10::impl::ExcludeDispatchKeyGuard not_captured(kCaptureKey);
    try {
      auto real = [](const at::Tensor& t) {
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCUDA)).requires_grad_(t.requires_grad());
      };
      choice = at::_fused_sdp_choice(real(q), real(k), real(v), /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                     /*is_causal=*/true);
    } catch (const c10::Error&) {
      choice = kSdpFlash;  // no usable device after all: plan as flash attention
    }
  }
  chosen.emplace(std::move(key), choice);
  return choice;
}
#endif

}  // namespace

at::DeviceType MetaAttentionDevice() { return g_meta_attention_device; }

ScopedMetaAttentionDevice::ScopedMetaAttentionDevice(at::DeviceType device) : previous_(g_meta_attention_device) {
  g_meta_attention_device = device;
}

ScopedMetaAttentionDevice::~ScopedMetaAttentionDevice() { g_meta_attention_device = previous_; }

#if TORCH_VERSION_MAJOR >= 2
void EnsureFusedAttentionMetaKernels() { RegisterFusedAttentionMetaKernels(); }

at::Tensor FusedCausalAttentionOnMetaForCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!FlashOrCudnnTakes(q)) return at::Tensor();
  const int64_t choice = CudaAttentionChoice(q, k, v);
  if (choice != kSdpFlash && choice != kSdpCudnn) return at::Tensor();
  EnsureFusedAttentionMetaKernels();
  if (choice == kSdpCudnn) {
    const bool log_sumexp = q.requires_grad() || k.requires_grad() || v.requires_grad();
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/{}, log_sumexp,
                                                               /*dropout_p=*/0.0, /*is_causal=*/true));
  }
  return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, /*is_causal=*/true));
}
#endif

}  // namespace magi::compat
