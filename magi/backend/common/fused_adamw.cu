#include "magi/backend/common/fused_adamw.h"

#include <cstdint>

#include "magi/backend/common/split_float.h"

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

// Four 16-bit values from / into one 8-byte word (element 0 in the low bits).
__device__ __forceinline__ void Unpack4(uint2 bits, uint32_t out[4]) {
  out[0] = bits.x & 0xffffu;
  out[1] = bits.x >> 16;
  out[2] = bits.y & 0xffffu;
  out[3] = bits.y >> 16;
}
__device__ __forceinline__ uint2 Pack4(const uint32_t in[4]) {
  return make_uint2(in[0] | (in[1] << 16), in[2] | (in[3] << 16));
}
__device__ __forceinline__ float Bf16BitsToFloat(uint32_t bits) { return __uint_as_float(bits << 16); }

// One element (the tail, or everything where the pointers do not allow vector access).
template <bool kSplit, bool kBf16Grad>
__device__ __forceinline__ void UpdateOne(const AdamWTensor& x, int64_t j, float decay, float step_size,
                                          float bc2_sqrt, const AdamWScalars& s) {
  const float p = kSplit ? JoinSplit(x.param_hi[j], x.param_lo[j]) : x.param[j];
  const float g = kBf16Grad ? Bf16BitsToFloat(x.grad_bf16[j]) : x.grad[j];
  float po, mo, vo;
  Update(p, g, x.exp_avg[j], x.exp_avg_sq[j], decay, step_size, bc2_sqrt, s, po, mo, vo);
  if constexpr (kSplit) {
    const SplitFloat split = SplitToBf16(po);
    x.param_hi_out[j] = split.hi;
    x.param_lo_out[j] = split.lo;
  } else {
    x.param_out[j] = po;
  }
  x.exp_avg_out[j] = mo;
  x.exp_avg_sq_out[j] = vo;
}

// Elements [begin, end) of one tensor: 16-byte loads and stores of four fp32 values (and
// 8-byte ones of four 16-bit values) where every pointer allows, then one at a time.
template <bool kSplit, bool kBf16Grad>
__device__ __forceinline__ void UpdateRange(const AdamWTensor& x, int64_t begin, int64_t end, float decay,
                                            float step_size, float bc2_sqrt, const AdamWScalars& s) {
  uintptr_t fp32_pointers = reinterpret_cast<uintptr_t>(x.exp_avg) | reinterpret_cast<uintptr_t>(x.exp_avg_sq) |
                            reinterpret_cast<uintptr_t>(x.exp_avg_out) |
                            reinterpret_cast<uintptr_t>(x.exp_avg_sq_out);
  uintptr_t half_pointers = 0;
  if constexpr (kSplit) {
    half_pointers |= reinterpret_cast<uintptr_t>(x.param_hi) | reinterpret_cast<uintptr_t>(x.param_lo) |
                     reinterpret_cast<uintptr_t>(x.param_hi_out) | reinterpret_cast<uintptr_t>(x.param_lo_out);
  } else {
    fp32_pointers |= reinterpret_cast<uintptr_t>(x.param) | reinterpret_cast<uintptr_t>(x.param_out);
  }
  if constexpr (kBf16Grad) {
    half_pointers |= reinterpret_cast<uintptr_t>(x.grad_bf16);
  } else {
    fp32_pointers |= reinterpret_cast<uintptr_t>(x.grad);
  }
  int64_t i = begin + 4 * threadIdx.x;  // `begin` is a multiple of 4 elements
  if ((fp32_pointers & 15) == 0 && (half_pointers & 7) == 0) {
    for (; i + 3 < end; i += 4 * kThreads) {
      float p[4], g[4], po[4], mo[4], vo[4];
      if constexpr (kSplit) {
        uint32_t hi[4], lo[4];
        Unpack4(*reinterpret_cast<const uint2*>(x.param_hi + i), hi);
        Unpack4(*reinterpret_cast<const uint2*>(x.param_lo + i), lo);
#pragma unroll
        for (int k = 0; k < 4; ++k) p[k] = JoinSplit(static_cast<uint16_t>(hi[k]), static_cast<uint16_t>(lo[k]));
      } else {
        const float4 q = *reinterpret_cast<const float4*>(x.param + i);
        p[0] = q.x, p[1] = q.y, p[2] = q.z, p[3] = q.w;
      }
      if constexpr (kBf16Grad) {
        uint32_t gb[4];
        Unpack4(*reinterpret_cast<const uint2*>(x.grad_bf16 + i), gb);
#pragma unroll
        for (int k = 0; k < 4; ++k) g[k] = Bf16BitsToFloat(gb[k]);
      } else {
        const float4 q = *reinterpret_cast<const float4*>(x.grad + i);
        g[0] = q.x, g[1] = q.y, g[2] = q.z, g[3] = q.w;
      }
      const float4 m = *reinterpret_cast<const float4*>(x.exp_avg + i);
      const float4 v = *reinterpret_cast<const float4*>(x.exp_avg_sq + i);
      Update(p[0], g[0], m.x, v.x, decay, step_size, bc2_sqrt, s, po[0], mo[0], vo[0]);
      Update(p[1], g[1], m.y, v.y, decay, step_size, bc2_sqrt, s, po[1], mo[1], vo[1]);
      Update(p[2], g[2], m.z, v.z, decay, step_size, bc2_sqrt, s, po[2], mo[2], vo[2]);
      Update(p[3], g[3], m.w, v.w, decay, step_size, bc2_sqrt, s, po[3], mo[3], vo[3]);
      if constexpr (kSplit) {
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const SplitFloat split = SplitToBf16(po[k]);
          hi[k] = split.hi;
          lo[k] = split.lo;
        }
        *reinterpret_cast<uint2*>(x.param_hi_out + i) = Pack4(hi);
        *reinterpret_cast<uint2*>(x.param_lo_out + i) = Pack4(lo);
      } else {
        *reinterpret_cast<float4*>(x.param_out + i) = make_float4(po[0], po[1], po[2], po[3]);
      }
      *reinterpret_cast<float4*>(x.exp_avg_out + i) = make_float4(mo[0], mo[1], mo[2], mo[3]);
      *reinterpret_cast<float4*>(x.exp_avg_sq_out + i) = make_float4(vo[0], vo[1], vo[2], vo[3]);
    }
  }
  for (; i < end; i += 4 * kThreads) {
    for (int64_t j = i; j < i + 4 && j < end; ++j) UpdateOne<kSplit, kBf16Grad>(x, j, decay, step_size, bc2_sqrt, s);
  }
}

__global__ void __launch_bounds__(kThreads) MultiTensorAdamWKernel(LaunchArgs args, AdamWScalars s) {
  const int64_t block = blockIdx.x;
  int t = 0;
  while (t + 1 < args.count && args.first_block[t + 1] <= block) ++t;
  const AdamWTensor& x = args.tensors[t];
  const int64_t begin = (block - args.first_block[t]) * kChunk;
  const int64_t end = begin + kChunk < x.numel ? begin + kChunk : x.numel;
  const float decay = *s.decay, step_size = *s.step_size, bc2_sqrt = *s.bc2_sqrt;
  const bool split = x.param_hi != nullptr;
  const bool bf16_grad = x.grad_bf16 != nullptr;
  if (split && bf16_grad) {
    UpdateRange<true, true>(x, begin, end, decay, step_size, bc2_sqrt, s);
  } else if (split) {
    UpdateRange<true, false>(x, begin, end, decay, step_size, bc2_sqrt, s);
  } else if (bf16_grad) {
    UpdateRange<false, true>(x, begin, end, decay, step_size, bc2_sqrt, s);
  } else {
    UpdateRange<false, false>(x, begin, end, decay, step_size, bc2_sqrt, s);
  }
}

}  // namespace

cudaError_t LaunchMultiTensorAdamW(const AdamWTensor* tensors, int count, const AdamWScalars& scalars,
                                   cudaStream_t stream) {
  for (int t = 0; t < count; ++t) {  // half a split parameter: nothing is launched
    const AdamWTensor& x = tensors[t];
    const int split_pointers = (x.param_hi != nullptr) + (x.param_lo != nullptr) + (x.param_hi_out != nullptr) +
                               (x.param_lo_out != nullptr);
    if (split_pointers != 0 && split_pointers != 4) return cudaErrorInvalidValue;
  }
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
