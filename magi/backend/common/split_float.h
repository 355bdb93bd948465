// Split fp32 master weights: one fp32 value held as two 16-bit halves, so that the bf16
// parameter a mixed-precision step computes with IS the master's high half.
//
// Why (docs/benchmarks.md, the 953M step on one H200): with bf16 compute and fp32 masters, every step casts
// each parameter fp32 -> bf16 in forward and again in backward (world 1 reshards after
// forward): 294 cast kernels, 3.1 ms of the 953M step's 89.3 ms of kernels on an H200, and
// at the GPU's power cap their time is step time (removing the backward's 112 of them,
// ~1.5 ms of kernels, made the step 0.7-1.6 ms faster per round). Held split, the master is
//   hi = the bf16 the cast would give (round to nearest, ties to even: c10::BFloat16), and
//   lo = the low 16 bits of the fp32 value,
// so forward and backward read `hi` as the parameter (no cast, no copy), all-gathers send
// it as is, and AdamW reads and writes 4 bytes per parameter as before (JoinSplit, update,
// SplitToBf16).
//
// The one case two halves cannot tell apart: an exact tie (low bits 0x8000). Rounding to
// even then goes up from an odd top half and down from an even one, and both give the same
// (even) `hi` with the same `lo`, so the original could be either. SplitToBf16 therefore
// moves a tie by one fp32 ulp toward `hi` (low bits 0x8001 going up, 0x7fff going down):
// `hi` is still exactly the bf16 cast of the original, and the master differs from it by
// one unit in the last fp32 place in those values only (1 in 65,536 bit patterns; relative
// 2^-24 to 2^-23 for normal values, more for subnormals). Everything else splits and joins
// back bit for bit. NaN splits to bf16's quiet NaN 0x7fc0 (what c10::BFloat16 gives on the
// host; CUDA's conversion gives 0x7fff: a NaN either way) and joins back to a quiet NaN
// (sign and payload are not kept).
//
// Plain C++ (host) and CUDA (device): the multi-tensor AdamW kernel (fused_adamw.cu) uses
// the same two functions, and split_tensor.h does the same with ATen ops.
#ifndef MAGI_BACKEND_COMMON_SPLIT_FLOAT_H_
#define MAGI_BACKEND_COMMON_SPLIT_FLOAT_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MAGI_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MAGI_HOST_DEVICE inline
#endif

namespace magi {

struct SplitFloat {
  uint16_t hi;  // bf16 bits: the round-to-nearest-even bf16 of the value
  uint16_t lo;  // the value's low 16 fp32 bits (never 0x8000: see above)
};

MAGI_HOST_DEVICE uint32_t FloatBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

MAGI_HOST_DEVICE float BitsFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

MAGI_HOST_DEVICE SplitFloat SplitToBf16(float x) {
  const uint32_t bits = FloatBits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {0x7fc0, 0};  // NaN: bf16's quiet NaN
  const uint32_t top = bits >> 16;
  uint32_t lo = bits & 0xffffu;
  if (lo == 0x8000u) lo = (top & 1u) != 0 ? 0x8001u : 0x7fffu;  // a tie, moved one ulp toward hi
  const uint32_t up = lo > 0x8000u ? 1u : 0u;  // magnitude up: the bits of one sign are ordered
  return {static_cast<uint16_t>(top + up), static_cast<uint16_t>(lo)};
}

MAGI_HOST_DEVICE float JoinSplit(uint16_t hi, uint16_t lo) {
  const uint32_t top = static_cast<uint32_t>(hi) - (lo > 0x8000u ? 1u : 0u);
  return BitsFloat((top << 16) | lo);
}

}  // namespace magi

#endif  // MAGI_BACKEND_COMMON_SPLIT_FLOAT_H_
