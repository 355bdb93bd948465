#include "magi/backend/megakernel/device_program.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace magi::megakernel {

// decode_kernel.cu numbers the opcodes so.
static_assert(static_cast<int>(Opcode::kEmbed) == 0 && static_cast<int>(Opcode::kQkv) == 1 &&
              static_cast<int>(Opcode::kAttention) == 2 && static_cast<int>(Opcode::kOProj) == 3 &&
              static_cast<int>(Opcode::kGateUp) == 4 && static_cast<int>(Opcode::kDown) == 5 &&
              static_cast<int>(Opcode::kLogits) == 6 && static_cast<int>(Opcode::kArgmax) == 7 &&
              static_cast<int>(Opcode::kAttentionPart) == 8 && static_cast<int>(Opcode::kAttentionCombine) == 9);

absl::StatusOr<DeviceProgram> PackProgram(const Program& program) {
  const DecodeModel& m = program.model;
  if (m.batch > kMaxBatch || m.window > kMaxWindow || m.head_dim > kMaxHeadDim || m.head_dim % 8 != 0 ||
      m.dim % 8 != 0 || m.ffn_hidden % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the kernel takes batch <= ", kMaxBatch, ", window <= ", kMaxWindow, ", head_dim <= ", kMaxHeadDim,
        " and head_dim, dim, ffn_hidden multiples of 8 (16-byte loads); the model has batch ", m.batch, ", window ", m.window, ", head_dim ",
        m.head_dim, ", dim ", m.dim, ", ffn_hidden ", m.ffn_hidden));
  }
  DeviceProgram packed;
  packed.num_counters = static_cast<int32_t>(program.counters.size());
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    if (in.waits.size() > kMaxWaits || in.signals.size() > kMaxSignals) {
      return absl::InvalidArgumentError(absl::StrCat("#", i, " (", in.DebugString(), ") waits for ", in.waits.size(),
                                                     " and signals ", in.signals.size(), " counters; a record holds ",
                                                     kMaxWaits, " and ", kMaxSignals));
    }
    const bool matrix = in.opcode != Opcode::kAttention && in.opcode != Opcode::kArgmax &&
                        in.opcode != Opcode::kAttentionPart && in.opcode != Opcode::kAttentionCombine;
    if (matrix && in.row_end - in.row_begin > kMaxTileRows) {
      return absl::InvalidArgumentError(absl::StrCat("#", i, " (", in.DebugString(), ") has ",
                                                     in.row_end - in.row_begin, " rows; a tile holds ", kMaxTileRows));
    }
    if (in.row_end > kMax || in.batch_end > kMax) {
      return absl::InvalidArgumentError(absl::StrCat("#", i, " (", in.DebugString(), ") has rows beyond int32"));
    }
    DeviceInstruction& d = packed.instructions.emplace_back();
    d.opcode = static_cast<int32_t>(in.opcode);
    d.layer = in.layer;
    d.row_begin = static_cast<int32_t>(in.row_begin);
    d.row_end = static_cast<int32_t>(in.row_end);
    d.batch_begin = static_cast<int32_t>(in.batch_begin);
    d.batch_end = static_cast<int32_t>(in.batch_end);
    d.part = in.part;
    d.num_waits = static_cast<int32_t>(in.waits.size());
    d.num_signals = static_cast<int32_t>(in.signals.size());
    for (size_t w = 0; w < in.waits.size(); ++w) {
      d.waits[w] = in.waits[w];
      d.wait_increments[w] = static_cast<uint32_t>(program.counters[in.waits[w]].increments);
    }
    for (size_t s = 0; s < in.signals.size(); ++s) d.signals[s] = in.signals[s];
  }
  packed.queue_begin.push_back(0);
  for (const std::vector<int>& queue : program.queues) {
    packed.queue.insert(packed.queue.end(), queue.begin(), queue.end());
    packed.queue_begin.push_back(static_cast<int32_t>(packed.queue.size()));
  }
  return packed;
}

}  // namespace magi::megakernel
