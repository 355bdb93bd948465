#include "magi/backend/megakernel/program_timeline.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/file.h"

namespace magi::megakernel {
namespace {

// Microseconds from `origin`, as the trace format wants them.
double Us(uint64_t ns, uint64_t origin) { return static_cast<double>(ns - origin) / 1e3; }

uint64_t Origin(const std::vector<InstructionTimes>& times) {
  uint64_t origin = UINT64_MAX;
  for (const InstructionTimes& t : times) origin = std::min(origin, t.wait_begin);
  return times.empty() ? 0 : origin;
}

// The instruction's name without its SM (the trace's row says that).
std::string SliceName(const Instruction& in) {
  Instruction unplaced = in;
  unplaced.sm = -1;
  return unplaced.DebugString();
}

}  // namespace

absl::Status CheckTimeline(const Program& program, const std::vector<InstructionTimes>& times) {
  if (times.size() != program.instructions.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the timeline has ", times.size(), " records; the program has ",
                                                   program.instructions.size(), " instructions"));
  }
  for (size_t i = 0; i < times.size(); ++i) {
    const InstructionTimes& t = times[i];
    if (!(t.wait_begin <= t.start && t.start <= t.end)) {
      return absl::InvalidArgumentError(absl::StrCat("instruction #", i, " (", program.instructions[i].DebugString(),
                                                     ") has times out of order: waits from ", t.wait_begin,
                                                     ", starts ", t.start, ", ends ", t.end,
                                                     " (ns; was the step run?)"));
    }
  }
  return absl::OkStatus();
}

std::string TimelineTraceJson(const Program& program, const std::vector<InstructionTimes>& times) {
  const uint64_t origin = Origin(times);
  std::string json = "{\"traceEvents\": [\n";
  absl::StrAppend(&json, R"(  {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "MegaKernel decode step"}})");
  for (size_t sm = 0; sm < program.queues.size(); ++sm) {
    absl::StrAppendFormat(&json, ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                          "\"args\": {\"name\": \"SM %d\"}}", sm, sm);
  }
  for (size_t i = 0; i < times.size() && i < program.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    const InstructionTimes& t = times[i];
    if (t.start > t.wait_begin) {
      absl::StrAppendFormat(&json, ",\n  {\"name\": \"wait\", \"cat\": \"wait\", \"ph\": \"X\", \"pid\": 0, "
                            "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
                            in.sm, Us(t.wait_begin, origin), Us(t.start, t.wait_begin));
    }
    absl::StrAppendFormat(&json, ",\n  {\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, "
                          "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"instruction\": %d, \"bytes\": %d}}",
                          SliceName(in), OpcodeName(in.opcode), in.sm, Us(t.start, origin), Us(t.end, t.start), i,
                          in.bytes);
  }
  absl::StrAppend(&json, "\n]}\n");
  return json;
}

absl::Status WriteTimelineTrace(const Program& program, const std::vector<InstructionTimes>& times,
                                const std::string& path) {
  if (absl::Status status = CheckTimeline(program, times); !status.ok()) return status;
  return WriteFileAtomically(path, TimelineTraceJson(program, times));
}

std::string SummarizeTimeline(const Program& program, const std::vector<InstructionTimes>& times,
                              double peak_bytes_per_s) {
  struct Row {
    int count = 0;
    double busy_ns = 0, wait_ns = 0;
    int64_t bytes = 0;
  };
  std::map<Opcode, Row> rows;
  uint64_t first = UINT64_MAX, last = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < times.size() && i < program.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    Row& row = rows[in.opcode];
    ++row.count;
    row.busy_ns += static_cast<double>(times[i].end - times[i].start);
    row.wait_ns += static_cast<double>(times[i].start - times[i].wait_begin);
    row.bytes += in.bytes;
    bytes += in.bytes;
    first = std::min(first, times[i].wait_begin);
    last = std::max(last, times[i].end);
  }
  std::string out =
      "| stage | instructions | busy us (sum over SMs) | waiting us (sum over SMs) | bytes | GB/s while busy (per SM) |\n"
      "|---|---:|---:|---:|---:|---:|\n";
  for (const auto& [opcode, row] : rows) {
    absl::StrAppendFormat(&out, "| %s | %d | %.1f | %.1f | %d | %.1f |\n", OpcodeName(opcode), row.count,
                          row.busy_ns / 1e3, row.wait_ns / 1e3, row.bytes,
                          row.busy_ns > 0 ? row.bytes / row.busy_ns : 0.0);
  }
  const double span_ns = last > first ? static_cast<double>(last - first) : 0.0;
  absl::StrAppendFormat(&out, "\nstep: %.1f us from the first wait to the last end on %d SMs; %d bytes streamed",
                        span_ns / 1e3, static_cast<int>(program.queues.size()), bytes);
  if (span_ns > 0) absl::StrAppendFormat(&out, ", %.1f GB/s", bytes / span_ns);
  if (span_ns > 0 && peak_bytes_per_s > 0) {
    absl::StrAppendFormat(&out, " (%.1f%% of the peak %.0f GB/s)", 100.0 * bytes / span_ns * 1e9 / peak_bytes_per_s,
                          peak_bytes_per_s / 1e9);
  }
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace magi::megakernel
