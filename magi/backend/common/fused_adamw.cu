#include "magi/backend/common/fused_adamw.h"

#include <cstdint>

namespace magi::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 32768;  // elements per block

struct LaunchArgs {
  AdamWTensor tensors[kMaxTensorsPerLaunch];
  int64_t first_block[kMaxTensorsPerLaunch + 1];  // prefix sums of blocks per tensor
  int count;
};

__device__ __forceinline__ void Update(float p, float g, float m, float v, float decay, float step_size,
                                       float bc2_sqrt, const AdamWScalars& s, float& p_out, float& m_out,
                                       float& v_out) {
  // The association of LibTorch's op-by-op AdamW, every operation rounded on its own
  // (no multiply-add contraction): the compiler would otherwise contract differently in
  // the fp32- and bf16-gradient loops, and a deferred gradient cast (fused_adamw.h) would
  // not be bit for bit the update from the cast.
  float m2 = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(s.one_minus_beta1, g));
  float v2 = __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v2), bc2_sqrt), s.eps);
  float update = __fmul_rn(__fdiv_rn(m2, denom), step_size);
  p_out = __fsub_rn(__fmul_rn(p, decay), update);
  m_out = m2;
  v_out = v2;
}

__global__ void __launch_bounds__(kThreads) MultiTensorAdamWKernel(LaunchArgs args, AdamWScalars s) {
  const int64_t block = blockIdx.x;
  int t = 0;
  while (t + 1 < args.count && args.first_block[t + 1] <= block) ++t;
  const AdamWTensor& x = args.tensors[t];
  const int64_t begin = (block - args.first_block[t]) * kChunk;
  const int64_t end = begin + kChunk < x.numel ? begin + kChunk : x.numel;
  const float decay = *s.decay, step_size = *s.step_size, bc2_sqrt = *s.bc2_sqrt;
  const uintptr_t state_alignment =
      reinterpret_cast<uintptr_t>(x.param) | reinterpret_cast<uintptr_t>(x.exp_avg) |
      reinterpret_cast<uintptr_t>(x.exp_avg_sq) | reinterpret_cast<uintptr_t>(x.param_out) |
      reinterpret_cast<uintptr_t>(x.exp_avg_out) | reinterpret_cast<uintptr_t>(x.exp_avg_sq_out);
  int64_t i = begin + 4 * threadIdx.x;
  if (x.grad_bf16 != nullptr) {
    // bf16 gradient: 8-byte loads of 4 gradients when aligned, widened exactly to fp32.
    if ((state_alignment & 15) == 0 && (reinterpret_cast<uintptr_t>(x.grad_bf16) & 7) == 0) {
      for (; i + 3 < end; i += 4 * kThreads) {
        float4 p = *reinterpret_cast<const float4*>(x.param + i);
        uint2 gb = *reinterpret_cast<const uint2*>(x.grad_bf16 + i);
        float4 m = *reinterpret_cast<const float4*>(x.exp_avg + i);
        float4 v = *reinterpret_cast<const float4*>(x.exp_avg_sq + i);
        float4 po, mo, vo;
        Update(p.x, __uint_as_float(gb.x << 16), m.x, v.x, decay, step_size, bc2_sqrt, s, po.x, mo.x, vo.x);
        Update(p.y, __uint_as_float(gb.x & 0xffff0000u), m.y, v.y, decay, step_size, bc2_sqrt, s, po.y, mo.y, vo.y);
        Update(p.z, __uint_as_float(gb.y << 16), m.z, v.z, decay, step_size, bc2_sqrt, s, po.z, mo.z, vo.z);
        Update(p.w, __uint_as_float(gb.y & 0xffff0000u), m.w, v.w, decay, step_size, bc2_sqrt, s, po.w, mo.w, vo.w);
        *reinterpret_cast<float4*>(x.param_out + i) = po;
        *reinterpret_cast<float4*>(x.exp_avg_out + i) = mo;
        *reinterpret_cast<float4*>(x.exp_avg_sq_out + i) = vo;
      }
    }
    for (; i < end; i += 4 * kThreads) {
      for (int64_t j = i; j < i + 4 && j < end; ++j) {
        float g = __uint_as_float(static_cast<uint32_t>(x.grad_bf16[j]) << 16);
        Update(x.param[j], g, x.exp_avg[j], x.exp_avg_sq[j], decay, step_size, bc2_sqrt, s, x.param_out[j],
               x.exp_avg_out[j], x.exp_avg_sq_out[j]);
      }
    }
    return;
  }
  if (((state_alignment | reinterpret_cast<uintptr_t>(x.grad)) & 15) == 0) {
    // 16-byte loads and stores; `begin` is a multiple of 4 elements.
    for (; i + 3 < end; i += 4 * kThreads) {
      float4 p = *reinterpret_cast<const float4*>(x.param + i);
      float4 g = *reinterpret_cast<const float4*>(x.grad + i);
      float4 m = *reinterpret_cast<const float4*>(x.exp_avg + i);
      float4 v = *reinterpret_cast<const float4*>(x.exp_avg_sq + i);
      float4 po, mo, vo;
      Update(p.x, g.x, m.x, v.x, decay, step_size, bc2_sqrt, s, po.x, mo.x, vo.x);
      Update(p.y, g.y, m.y, v.y, decay, step_size, bc2_sqrt, s, po.y, mo.y, vo.y);
      Update(p.z, g.z, m.z, v.z, decay, step_size, bc2_sqrt, s, po.z, mo.z, vo.z);
      Update(p.w, g.w, m.w, v.w, decay, step_size, bc2_sqrt, s, po.w, mo.w, vo.w);
      *reinterpret_cast<float4*>(x.param_out + i) = po;
      *reinterpret_cast<float4*>(x.exp_avg_out + i) = mo;
      *reinterpret_cast<float4*>(x.exp_avg_sq_out + i) = vo;
    }
  }
  // The tail (or everything, unaligned): one element at a time.
  for (; i < end; i += 4 * kThreads) {
    for (int64_t j = i; j < i + 4 && j < end; ++j) {
      Update(x.param[j], x.grad[j], x.exp_avg[j], x.exp_avg_sq[j], decay, step_size, bc2_sqrt, s, x.param_out[j],
             x.exp_avg_out[j], x.exp_avg_sq_out[j]);
    }
  }
}

}  // namespace

cudaError_t LaunchMultiTensorAdamW(const AdamWTensor* tensors, int count, const AdamWScalars& scalars,
                                   cudaStream_t stream) {
  int k = 0;
  while (k < count) {
    LaunchArgs args;
    args.count = 0;
    int64_t blocks = 0;
    for (; k < count && args.count < kMaxTensorsPerLaunch; ++k) {
      if (tensors[k].numel == 0) continue;
      args.tensors[args.count] = tensors[k];
      args.first_block[args.count] = blocks;
      blocks += (tensors[k].numel + kChunk - 1) / kChunk;
      ++args.count;
    }
    if (args.count == 0) continue;
    args.first_block[args.count] = blocks;
    MultiTensorAdamWKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args, scalars);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace magi::cuda
