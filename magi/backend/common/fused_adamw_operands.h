// The multi-tensor AdamW kernel's view (fused_adamw.h) of one magi::adamw or
// magi::adamw_split node's LibTorch tensors, for the runtimes that launch it (nccl_stream)
// and the kernel calibrator that times it.
#ifndef MAGI_BACKEND_COMMON_FUSED_ADAMW_OPERANDS_H_
#define MAGI_BACKEND_COMMON_FUSED_ADAMW_OPERANDS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "magi/backend/common/fused_adamw.h"
#include "magi/ir/magi_ops.h"

namespace magi {

// The dtype the kernel takes for operand `k` (the op's own order) of a plain (`split`
// false) or split AdamW node: bf16 and int16 for the halves, bf16 for a gradient whose
// cast was deferred (`bf16_grad`), fp32 for everything else.
inline at::ScalarType FusedAdamWOperandType(bool split, int k, bool bf16_grad) {
  if (split && k == kAdamWSplitHi) return at::kBFloat16;
  if (split && k == kAdamWSplitLo) return at::kShort;
  if (k == AdamWOperandIndex(split, kAdamWGrad) && bf16_grad) return at::kBFloat16;
  return at::kFloat;
}

// `o`: the node's operands (its op's order), contiguous CUDA tensors of the dtypes the
// kernel takes (fp32; the gradient fp32 or bf16; split: hi bf16, lo int16). `out`: its
// results (p', m', v' or hi', lo', m', v'), the same; they may be the state operands
// themselves (in place).
inline cuda::AdamWTensor FusedAdamWTensorOf(bool split, const std::vector<at::Tensor>& o,
                                            const std::vector<at::Tensor>& out) {
  const at::Tensor& grad = o[AdamWOperandIndex(split, kAdamWGrad)];
  const bool bf16_grad = grad.scalar_type() == at::kBFloat16;
  cuda::AdamWTensor tensor{split ? nullptr : o[kAdamWParam].data_ptr<float>(),
                           bf16_grad ? nullptr : grad.data_ptr<float>(),
                           o[AdamWOperandIndex(split, kAdamWExpAvg)].data_ptr<float>(),
                           o[AdamWOperandIndex(split, kAdamWExpAvgSq)].data_ptr<float>(),
                           split ? nullptr : out[0].data_ptr<float>(),
                           out[out.size() - 2].data_ptr<float>(),
                           out[out.size() - 1].data_ptr<float>(),
                           o[kAdamWParam].numel()};
  if (bf16_grad) tensor.grad_bf16 = static_cast<const uint16_t*>(grad.data_ptr());
  if (split) {
    tensor.param_hi = static_cast<const uint16_t*>(o[kAdamWSplitHi].data_ptr());
    tensor.param_lo = static_cast<const uint16_t*>(o[kAdamWSplitLo].data_ptr());
    tensor.param_hi_out = static_cast<uint16_t*>(out[0].data_ptr());
    tensor.param_lo_out = static_cast<uint16_t*>(out[1].data_ptr());
  }
  return tensor;
}

// The step scalars (0-dim fp32 CUDA tensors among `o`) and the node's constants.
inline cuda::AdamWScalars FusedAdamWScalarsOf(bool split, const std::vector<at::Tensor>& o,
                                              const AdamWConstants& c) {
  return {o[AdamWOperandIndex(split, kAdamWDecay)].data_ptr<float>(),
          o[AdamWOperandIndex(split, kAdamWStepSize)].data_ptr<float>(),
          o[AdamWOperandIndex(split, kAdamWBc2Sqrt)].data_ptr<float>(),
          static_cast<float>(c.beta1),
          static_cast<float>(c.beta2),
          static_cast<float>(c.eps),
          static_cast<float>(1.0 - c.beta1),
          static_cast<float>(1.0 - c.beta2)};
}

}  // namespace magi

#endif  // MAGI_BACKEND_COMMON_FUSED_ADAMW_OPERANDS_H_
