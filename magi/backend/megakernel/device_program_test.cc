#include "magi/backend/megakernel/device_program.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/decode_model.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/megakernel/test_models.h"
#include "magi/base/gtest_printers.h"

namespace magi::megakernel {
namespace {

DecodeModel Small(int64_t batch) { return testing::TinyGqaModel(batch); }

// The records say what the program says: the same instructions, waits with their counters'
// increments per step, signals, and each SM's queue as one range.
TEST(DeviceProgramTest, PacksEveryInstructionAndQueue) {
  absl::StatusOr<Program> program = BuildProgram(Small(2), ProgramOptions{/*num_sms=*/5});
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<DeviceProgram> packed = PackProgram(*program);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->instructions.size(), program->instructions.size());
  EXPECT_EQ(packed->num_counters, static_cast<int32_t>(program->counters.size()));
  for (size_t i = 0; i < program->instructions.size(); ++i) {
    const Instruction& in = program->instructions[i];
    const DeviceInstruction& d = packed->instructions[i];
    EXPECT_EQ(d.opcode, static_cast<int32_t>(in.opcode));
    EXPECT_EQ(d.layer, in.layer);
    EXPECT_EQ(d.row_begin, in.row_begin);
    EXPECT_EQ(d.row_end, in.row_end);
    EXPECT_EQ(d.batch_begin, in.batch_begin);
    ASSERT_EQ(d.num_waits, static_cast<int32_t>(in.waits.size()));
    for (int w = 0; w < d.num_waits; ++w) {
      EXPECT_EQ(d.waits[w], in.waits[w]);
      EXPECT_EQ(d.wait_increments[w], static_cast<uint32_t>(program->counters[in.waits[w]].increments));
    }
    ASSERT_EQ(d.num_signals, static_cast<int32_t>(in.signals.size()));
    for (int s = 0; s < d.num_signals; ++s) EXPECT_EQ(d.signals[s], in.signals[s]);
  }
  ASSERT_EQ(packed->queue_begin.size(), 6u);
  for (int sm = 0; sm < 5; ++sm) {
    const std::vector<int32_t> queue(packed->queue.begin() + packed->queue_begin[sm],
                                     packed->queue.begin() + packed->queue_begin[sm + 1]);
    EXPECT_EQ(queue, std::vector<int32_t>(program->queues[sm].begin(), program->queues[sm].end())) << "SM " << sm;
  }
}

TEST(DeviceProgramTest, WhatTheKernelIsNotSizedForIsRefused) {
  absl::StatusOr<Program> program = BuildProgram(Small(9), ProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  absl::Status status = PackProgram(*program).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "the kernel takes batch <= 8")) << status;
  // A tile of more rows than the kernel's shared memory holds.
  DecodeModel m = Small(1);
  m.ffn_hidden = 1024;
  program = BuildProgram(m, ProgramOptions{/*num_sms=*/1});
  ASSERT_TRUE(program.ok()) << program.status();
  status = PackProgram(*program).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "a tile holds 256")) << status;
  // Bounded as the kernel needs, the same model packs.
  program = BuildProgram(m, ProgramOptions{/*num_sms=*/1, 0, /*max_tile_rows=*/kMaxTileRows});
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_TRUE(PackProgram(*program).ok());
  // A head of 4 dimensions: the kernel reads cache rows 16 bytes (8 values) at a time.
  m = Small(1);
  m.n_heads = 16;
  m.n_kv_heads = 8;
  m.head_dim = 4;
  program = BuildProgram(m, ProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  status = PackProgram(*program).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "head_dim, dim, ffn_hidden multiples of 8")) << status;
  // A wait more than a record holds.
  program = BuildProgram(Small(1), ProgramOptions{});
  ASSERT_TRUE(program.ok());
  program->instructions[3].waits = {0, 0, 0};
  status = PackProgram(*program).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "a record holds 2 and 4")) << status;
}

}  // namespace
}  // namespace magi::megakernel
