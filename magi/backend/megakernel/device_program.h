// An instruction program (instruction_program.h) packed for the CUDA kernel (decode_kernel.h):
// fixed-size instruction records and each SM's queue as ranges of one index array, plain
// data that is copied to the device once per compiled shape. No CUDA here: packing and its
// checks build and test on any machine.
#ifndef MAGI_BACKEND_MEGAKERNEL_DEVICE_PROGRAM_H_
#define MAGI_BACKEND_MEGAKERNEL_DEVICE_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/megakernel/device_records.h"
#include "magi/backend/megakernel/instruction_program.h"

namespace magi::megakernel {

struct DeviceProgram {
  std::vector<DeviceInstruction> instructions;  // the sequential order
  std::vector<int32_t> queue_begin;             // num_sms + 1 offsets into `queue`
  std::vector<int32_t> queue;                   // each SM's instruction indices, in order
  int32_t num_counters = 0;
};

// InvalidArgument when an instruction waits for or signals more counters than a record holds,
// or the model or a tile exceeds what the kernel is sized for (the limits above; widths that
// are not a multiple of 8, the kernel's 16-byte weight loads).
absl::StatusOr<DeviceProgram> PackProgram(const Program& program);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_DEVICE_PROGRAM_H_
