#include "magi/compat/attention.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <map>
#include <mutex>
#include <vector>

namespace magi::compat {
namespace {

thread_local at::Device g_meta_attention_device(at::kMeta);

#if TORCH_VERSION_MAJOR >= 2
// PyTorch's SDPBackend numbering (aten/src/ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kSdpFlash = 1;
constexpr int64_t kSdpCudnn = 3;

// Whether CUDA's flash and cuDNN attention take these inputs at all: 4-D fp16/bf16 with a
// head size that is a multiple of 8 up to 256 (fp32 runs neither on the GPU).
bool FlashOrCudnnTakes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (const at::Tensor& t : {q, k, v}) {
    if (t.dim() != 4 || t.scalar_type() != q.scalar_type()) return false;
  }
  const int64_t head_dim = q.size(-1);
  return (q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16) && head_dim % 8 == 0 && head_dim <= 256;
}

// What PyTorch's SDPA asks of the fused kernels: the logsumexp only when a backward will
// need it (should_compute_logsumexp).
bool NeedsLogSumExp(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// The backend PyTorch picks on `device` for attention of this geometry, or kSdpFlash where
// no GPU is present. Cached: a capture asks once per layer with the same shapes. The key
// holds everything the choice reads: the device, the geometry, whether grads are needed
// and which backends the process has enabled.
int64_t CudaAttentionChoice(const at::Device& device, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, int64_t> chosen;
  const at::Context& context = at::globalContext();
  std::vector<int64_t> key = {device.index(),
                              static_cast<int64_t>(q.scalar_type()),
                              NeedsLogSumExp(q, k, v),
                              context.userEnabledFlashSDP(),
                              context.userEnabledCuDNNSDP(),
                              context.userEnabledMemEfficientSDP(),
                              context.userEnabledMathSDP()};
  for (const at::Tensor& t : {q, k, v}) {
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto it = chosen.find(key);
  if (it != chosen.end()) return it->second;
  int64_t choice = kSdpFlash;
  if (at::hasCUDA()) {
    // Probing tensors, not the step's: kept out of a capture that may be running, and made on
    // the step's GPU (not the current one, which other ranks' GPUs may share).
    c10::impl::ExcludeDispatchKeyGuard not_captured(kCaptureKey);
    try {
      c10::OptionalDeviceGuard on_device;
      if (device.has_index()) on_device.reset_device(device);
      const bool grad = NeedsLogSumExp(q, k, v);
      auto probe = [&](const at::Tensor& t) {
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(device)).requires_grad_(grad);
      };
      choice = at::_fused_sdp_choice(probe(q), probe(k), probe(v), /*attn_mask=*/{}, /*dropout_p=*/0.0,
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

at::Device MetaAttentionDevice() { return g_meta_attention_device; }

ScopedMetaAttentionDevice::ScopedMetaAttentionDevice(at::Device device) : previous_(g_meta_attention_device) {
  g_meta_attention_device = device;
}

ScopedMetaAttentionDevice::~ScopedMetaAttentionDevice() { g_meta_attention_device = previous_; }

ScopedMathAttention::ScopedMathAttention() {
#if TORCH_VERSION_MAJOR >= 2
  at::Context& context = at::globalContext();
  flash_ = context.userEnabledFlashSDP();
  memory_efficient_ = context.userEnabledMemEfficientSDP();
  cudnn_ = context.userEnabledCuDNNSDP();
  overrideable_ = context.userEnabledOverrideableSDP();
  context.setSDPUseFlash(false);
  context.setSDPUseMemEfficient(false);
  context.setSDPUseCuDNN(false);
  context.setSDPUseOverrideable(false);
#endif
}

ScopedMathAttention::~ScopedMathAttention() {
#if TORCH_VERSION_MAJOR >= 2
  at::Context& context = at::globalContext();
  context.setSDPUseFlash(flash_);
  context.setSDPUseMemEfficient(memory_efficient_);
  context.setSDPUseCuDNN(cudnn_);
  context.setSDPUseOverrideable(overrideable_);
#endif
}

#if TORCH_VERSION_MAJOR >= 2
at::Tensor FusedCausalAttentionOnMetaForCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const at::Device device = MetaAttentionDevice();
  if (!device.is_cuda() || !FlashOrCudnnTakes(q, k, v)) return at::Tensor();
  const int64_t choice = CudaAttentionChoice(device, q, k, v);
  if (choice == kSdpCudnn) {
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/{}, NeedsLogSumExp(q, k, v),
                                                               /*dropout_p=*/0.0, /*is_causal=*/true));
  }
  if (choice == kSdpFlash) {
    return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, /*is_causal=*/true));
  }
  return at::Tensor();
}
#endif

}  // namespace magi::compat
