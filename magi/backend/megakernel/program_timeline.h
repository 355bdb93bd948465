// The timeline of one decode step as the persistent kernel recorded it: for every instruction,
// the global timer (ns) when its SM began waiting for its counters, when the waits were met and
// when it had signalled its own. Written as a Chrome/Perfetto trace (one row per SM, a slice per
// wait and per instruction) and summarized per stage: where the step's time goes, and how far
// from streaming the weights at memory speed it is.
//
//   std::vector<InstructionTimes> times = ...;  // DecodeKernelRunner::LastStepTimeline()
//   MAGI_RETURN_IF_ERROR(WriteTimelineTrace(program, times, "/tmp/decode.trace.json"));
//   std::cout << SummarizeTimeline(program, times, /*peak_bytes_per_s=*/3.35e12);
//
// No CUDA and no LibTorch: tested on the CPU with made-up times.
#ifndef MAGI_BACKEND_MEGAKERNEL_PROGRAM_TIMELINE_H_
#define MAGI_BACKEND_MEGAKERNEL_PROGRAM_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "magi/backend/megakernel/instruction_program.h"

namespace magi::megakernel {

// The kernel's record of one instruction (decode_kernel.h: KernelArgs::timeline).
struct InstructionTimes {
  uint64_t wait_begin = 0;  // ns, the GPU's global timer
  uint64_t start = 0;       // its waits met
  uint64_t end = 0;         // its counters signalled
};

// InvalidArgument unless there is one record per instruction with wait_begin <= start <= end.
absl::Status CheckTimeline(const Program& program, const std::vector<InstructionTimes>& times);

// The Chrome trace JSON (times in microseconds from the step's first record): a process
// "MegaKernel decode step", a thread per SM, a "wait" slice (where its waits took time) and
// a slice named by the instruction (Instruction::DebugString) per instruction.
std::string TimelineTraceJson(const Program& program, const std::vector<InstructionTimes>& times);
// TimelineTraceJson written atomically (temp file + rename); CheckTimeline's errors first.
absl::Status WriteTimelineTrace(const Program& program, const std::vector<InstructionTimes>& times,
                                const std::string& path);

// A Markdown table: per opcode the instructions, the summed busy and waiting time over the SMs,
// the bytes streamed and their rate while busy; then the step's span (first wait to last end),
// the bytes the step streams over that span and, with `peak_bytes_per_s` > 0, that as a share
// of the memory's peak.
std::string SummarizeTimeline(const Program& program, const std::vector<InstructionTimes>& times,
                              double peak_bytes_per_s = 0);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_PROGRAM_TIMELINE_H_
