// The records a packed instruction program is made of, shared by the packer
// (device_program.h) and the CUDA kernel (decode_kernel.cu): plain data and the limits the
// kernel's shared memory is sized for, no other header, so that nvcc compiles it as it is.
#ifndef MAGI_BACKEND_MEGAKERNEL_DEVICE_RECORDS_H_
#define MAGI_BACKEND_MEGAKERNEL_DEVICE_RECORDS_H_

#include <cstdint>

namespace magi::megakernel {

inline constexpr int kMaxWaits = 2;
inline constexpr int kMaxSignals = 4;
// What the kernel's shared memory is sized for (decode_kernel.cu).
inline constexpr int kMaxBatch = 8;         // sequences a matrix tile computes at once
inline constexpr int kMaxTileRows = 256;    // rows of one matrix tile
inline constexpr int kMaxWindow = 4096;     // cache positions attention scores at once
inline constexpr int kMaxHeadDim = 256;

// One instruction as the kernel reads it. Counters only grow: step s (0, 1, ...) waits until
// counter c reaches (s + 1) * increments[c], so nothing resets them between steps (a uint32
// counter lasts 2^32 / increments steps: over 10 million for the 953M program).
struct DeviceInstruction {
  int32_t opcode = 0;  // Opcode
  int32_t layer = -1;
  int32_t row_begin = 0, row_end = 0;
  int32_t batch_begin = 0, batch_end = 0;
  int32_t part = 0;  // attention_part: which part of the positions
  int32_t num_waits = 0, num_signals = 0;
  int32_t waits[kMaxWaits] = {};
  uint32_t wait_increments[kMaxWaits] = {};  // the waited counter's increments per step
  int32_t signals[kMaxSignals] = {};
};

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_DEVICE_RECORDS_H_
