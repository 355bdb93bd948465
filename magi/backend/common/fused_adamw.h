// A multi-tensor AdamW kernel: one launch updates up to kMaxTensorsPerLaunch parameter
// shards (more are split over several launches), reading the per-step scalars from
// device memory so the launches can live inside a CUDA graph. Plain CUDA: no LibTorch.
//
// Per element (float32), in the order of LibTorch's op-by-op AdamW (magi::adamw), each
// operation rounded on its own (no fused multiply-add):
//   m' = m * beta1 + (1 - beta1) * g
//   v' = v * beta2 + (1 - beta2) * g * g
//   p' = p * decay - (m' / (sqrt(v') / bc2_sqrt + eps)) * step_size
// Outputs may alias inputs (in-place update). The gradient may instead be bf16
// (`grad_bf16`, raw bits): it is widened to fp32 as it is read, which is exact, so the
// update equals the one from the fp32 cast of that gradient bit for bit. The runtime uses
// it to fold a mixed-precision step's bf16 -> fp32 gradient cast into this kernel.
// The parameter may instead be held split (magi::adamw_split: `param_hi`/`param_lo` and
// their outputs, split_float.h): joined as it is read, split again as it is written, so the
// update is the one of the joined fp32 value and its high half is the bf16 cast of it.
#ifndef MAGI_BACKEND_COMMON_FUSED_ADAMW_H_
#define MAGI_BACKEND_COMMON_FUSED_ADAMW_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace magi::cuda {

struct AdamWTensor {
  const float* param;         // fp32 parameter, or null when param_hi is set
  const float* grad;          // fp32 gradient, or null when grad_bf16 is set
  const float* exp_avg;
  const float* exp_avg_sq;
  float* param_out;           // null when param_hi is set
  float* exp_avg_out;
  float* exp_avg_sq_out;
  int64_t numel;
  const uint16_t* grad_bf16 = nullptr;  // bf16 gradient (bits), read instead of `grad`
  // A split parameter (bf16 high half, low 16 bits), read and written instead of
  // `param`/`param_out`; all four set or none.
  const uint16_t* param_hi = nullptr;
  const uint16_t* param_lo = nullptr;
  uint16_t* param_hi_out = nullptr;
  uint16_t* param_lo_out = nullptr;
};

struct AdamWScalars {
  const float* decay;      // 1 - lr * weight_decay (device, 0-dim)
  const float* step_size;  // lr / (1 - beta1^t)
  const float* bc2_sqrt;   // sqrt(1 - beta2^t)
  float beta1;
  float beta2;
  float eps;
  // 1 - beta1 and 1 - beta2 computed in double and rounded once, as LibTorch rounds its
  // `alpha`/`value` arguments (1.0f - 0.999f is 4.7e-5 away from 0.001f).
  float one_minus_beta1;
  float one_minus_beta2;
};

inline constexpr int kMaxTensorsPerLaunch = 24;

// Enqueues the update of `count` tensors on `stream`; returns the first launch error, or
// cudaErrorInvalidValue (launching nothing) when a tensor has some but not all of its
// split-parameter pointers set.
cudaError_t LaunchMultiTensorAdamW(const AdamWTensor* tensors, int count, const AdamWScalars& scalars,
                                   cudaStream_t stream);

}  // namespace magi::cuda

#endif  // MAGI_BACKEND_COMMON_FUSED_ADAMW_H_
