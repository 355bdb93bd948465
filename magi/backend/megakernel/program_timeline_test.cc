// The step's timeline from the kernel's records: checked, written as a Chrome trace, summarized.
#include "magi/backend/megakernel/program_timeline.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/test_models.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"

namespace magi::megakernel {
namespace {

Program SmallProgram() {
  absl::StatusOr<Program> program = BuildProgram(testing::TinyGqaModel(/*batch=*/2), ProgramOptions{/*num_sms=*/4});
  EXPECT_TRUE(program.ok()) << program.status();
  return *program;
}

// Each SM runs its queue back to back: 100 ns of waiting, then 1 us per instruction.
std::vector<InstructionTimes> BackToBack(const Program& program) {
  std::vector<InstructionTimes> times(program.instructions.size());
  for (const std::vector<int>& queue : program.queues) {
    uint64_t now = 5'000'000;
    for (int i : queue) {
      times[i] = {now, now + 100, now + 1100};
      now += 1100;
    }
  }
  return times;
}

TEST(ProgramTimelineTest, RecordsAreCheckedNamingTheInstruction) {
  const Program program = SmallProgram();
  std::vector<InstructionTimes> times = BackToBack(program);
  EXPECT_TRUE(CheckTimeline(program, times).ok());
  times[3].end = times[3].start - 1;
  const absl::Status status = CheckTimeline(program, times);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "instruction #3 (")) << status;
  times.pop_back();
  EXPECT_TRUE(absl::StrContains(CheckTimeline(program, times).message(), "records; the program has"));
  // Nothing is written from a bad timeline.
  const std::string path = ::testing::TempDir() + "/bad.trace.json";
  EXPECT_FALSE(WriteTimelineTrace(program, times, path).ok());
  EXPECT_FALSE(ReadFile(path).ok());
}

TEST(ProgramTimelineTest, TheTraceHasARowPerSmAndASlicePerInstructionAndWait) {
  const Program program = SmallProgram();
  const std::vector<InstructionTimes> times = BackToBack(program);
  const std::string path = ::testing::TempDir() + "/step.trace.json";
  ASSERT_TRUE(WriteTimelineTrace(program, times, path).ok());
  absl::StatusOr<std::string> json = ReadFile(path);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(absl::StrContains(*json, R"("args": {"name": "SM 3"})"));
  const Instruction& first = program.instructions[program.queues[0][0]];
  // Times from the step's first record, in microseconds.
  EXPECT_TRUE(absl::StrContains(*json, R"({"name": "wait", "cat": "wait", "ph": "X", "pid": 0, "tid": 0, "ts": 0.000, "dur": 0.100})"))
      << *json;
  EXPECT_TRUE(absl::StrContains(*json, absl::StrCat(R"({"name": "embed rows [0, )")));
  EXPECT_FALSE(absl::StrContains(*json, " on SM ")) << "the row names the SM";
  size_t slices = 0;
  for (size_t at = json->find("\"ph\": \"X\""); at != std::string::npos; at = json->find("\"ph\": \"X\"", at + 1)) ++slices;
  EXPECT_EQ(slices, 2 * program.instructions.size());
  EXPECT_EQ(first.opcode, Opcode::kEmbed);
}

TEST(ProgramTimelineTest, TheSummaryAddsUpPerStageAndRatesTheStep) {
  const Program program = SmallProgram();
  const std::vector<InstructionTimes> times = BackToBack(program);
  const std::string summary = SummarizeTimeline(program, times, /*peak_bytes_per_s=*/1e12);
  int64_t bytes = 0;
  size_t longest = 0;
  for (const Instruction& in : program.instructions) bytes += in.bytes;
  for (const std::vector<int>& queue : program.queues) longest = std::max(longest, queue.size());
  int down = 0;
  for (const Instruction& in : program.instructions) down += in.opcode == Opcode::kDown;
  EXPECT_TRUE(absl::StrContains(summary, absl::StrFormat("| down | %d | %.1f | %.1f |", down, down * 1.0, down * 0.1)))
      << summary;
  const double span_us = longest * 1.1;
  EXPECT_TRUE(absl::StrContains(summary, absl::StrFormat("step: %.1f us from the first wait to the last end on 4 SMs; %d "
                                                         "bytes streamed, %.1f GB/s (%.1f%% of the peak 1000 GB/s)",
                                                         span_us, bytes, bytes / (span_us * 1e3),
                                                         100.0 * bytes / (span_us * 1e3) / 1e3)))
      << summary;
}

}  // namespace
}  // namespace magi::megakernel
