#include "magi/backend/megakernel/instruction_program.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/decode_model.h"
#include "magi/backend/megakernel/program_check.h"
#include "magi/base/gtest_printers.h"

namespace magi::megakernel {
namespace {

// llama.py's "1b" shape (the 953M benchmark model): byte vocabulary, window 1,152.
DecodeModel Llama953M(int64_t batch) {
  DecodeModel m;
  m.batch = batch;
  m.dim = 2048;
  m.n_layers = 16;
  m.n_heads = 16;
  m.n_kv_heads = 16;
  m.head_dim = 128;
  m.ffn_hidden = 5632;
  m.vocab = 256;
  m.window = 1152;
  return m;
}

int Count(const Program& program, Opcode opcode, int layer) {
  return static_cast<int>(std::count_if(program.instructions.begin(), program.instructions.end(),
                                        [&](const Instruction& in) { return in.opcode == opcode && in.layer == layer; }));
}

int IndexOf(const Program& program, Opcode opcode, int layer, int nth = 0) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    if (in.opcode == opcode && in.layer == layer && nth-- == 0) return static_cast<int>(i);
  }
  return -1;
}

TEST(InstructionProgramTest, The953MStepOnAnH100IsCorrectInEveryOrder) {
  for (int64_t batch : {1, 8}) {
    absl::StatusOr<Program> program = BuildProgram(Llama953M(batch), ProgramOptions{});
    ASSERT_TRUE(program.ok()) << program.status();
    std::cout << "batch " << batch << ": " << program->Summary();
    EXPECT_EQ(CheckProgram(*program), absl::OkStatus());
    // Tiles: 16 rows for the 2,048-row matrices, 48 for the 6,144 rows of q/k/v and the 5,632
    // of gate/up (the smallest multiple of 16 that makes at most 132 tiles); attention per kv
    // group and sequence, its positions split in 132 / 16 = 8 parts at batch 1 (128 SMs busy),
    // unsplit at batch 8 (already 128 instructions).
    EXPECT_EQ(Count(*program, Opcode::kEmbed, -1), 128);
    EXPECT_EQ(Count(*program, Opcode::kQkv, 3), 128);
    EXPECT_EQ(program->attention_splits, batch == 1 ? 8 : 1);
    EXPECT_EQ(Count(*program, Opcode::kAttention, 3), batch == 1 ? 0 : 16 * batch);
    EXPECT_EQ(Count(*program, Opcode::kAttentionPart, 3), batch == 1 ? 16 * 8 : 0);
    EXPECT_EQ(Count(*program, Opcode::kAttentionCombine, 3), batch == 1 ? 16 : 0);
    EXPECT_EQ(Count(*program, Opcode::kOProj, 3), 128);
    EXPECT_EQ(Count(*program, Opcode::kGateUp, 3), 118);
    EXPECT_EQ(Count(*program, Opcode::kDown, 3), 128);
    EXPECT_EQ(Count(*program, Opcode::kLogits, -1), 16);
    EXPECT_EQ(Count(*program, Opcode::kArgmax, -1), batch);
    // Every weight matrix is streamed once per step.
    int64_t matrix_bytes = 0;
    for (const Instruction& in : program->instructions) {
      if (in.opcode == Opcode::kOProj || in.opcode == Opcode::kDown) matrix_bytes += in.bytes;
    }
    EXPECT_EQ(matrix_bytes, 16 * 2 * (2048 * 2048 + 2048 * 5632));
    // Bytes per SM within 10% of the mean: no SM holds up a stage much.
    int64_t most = 0, total = 0;
    for (const std::vector<int>& queue : program->queues) {
      int64_t bytes = 0;
      for (int i : queue) bytes += program->instructions[i].bytes;
      most = std::max(most, bytes);
      total += bytes;
    }
    EXPECT_LT(most, 1.1 * total / 132);
    // No SM runs two instructions of one stage (every stage has at most 132), and a layer's
    // attention combines come after all of its parts.
    std::map<std::pair<Opcode, int>, std::set<int>> sms_of_stage;
    std::map<int, size_t> last_part, first_combine;
    for (size_t i = 0; i < program->instructions.size(); ++i) {
      const Instruction& in = program->instructions[i];
      const bool first_of_stage_on_sm = sms_of_stage[std::make_pair(in.opcode, in.layer)].insert(in.sm).second;
      EXPECT_TRUE(first_of_stage_on_sm) << in.DebugString();
      if (in.opcode == Opcode::kAttentionPart) last_part[in.layer] = i;
      if (in.opcode == Opcode::kAttentionCombine && !first_combine.count(in.layer)) first_combine[in.layer] = i;
    }
    for (const auto& [layer, combine] : first_combine) EXPECT_GT(combine, last_part[layer]) << "layer " << layer;
  }
}

TEST(InstructionProgramTest, AnUnseenShapeWithGroupedQueryAttention) {
  DecodeModel m;
  m.batch = 8;
  m.dim = 1536;
  m.n_layers = 7;
  m.n_heads = 12;
  m.n_kv_heads = 4;
  m.head_dim = 128;
  m.ffn_hidden = 4096;
  m.vocab = 1000;
  m.window = 512;
  absl::StatusOr<Program> program =
      BuildProgram(m, ProgramOptions{/*num_sms=*/78, /*tile_rows=*/0, /*max_tile_rows=*/0, /*attention_splits=*/1});
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(CheckProgram(*program), absl::OkStatus());
  EXPECT_EQ(Count(*program, Opcode::kAttention, 6), 4 * 8);
  // An attention instruction of group g waits only for the qkv tiles that touch group g.
  const Instruction& attention = program->instructions[IndexOf(*program, Opcode::kAttention, 2)];
  ASSERT_EQ(attention.waits.size(), 1u);
  EXPECT_EQ(program->counters[attention.waits[0]].name, "qkv.2.g0");
  // The 48-row tiles over q heads 0-2 (rows [0, 384): 8 tiles), k head 0 (rows [1536, 1664): 3)
  // and v head 0 (rows [2048, 2176): 4, the first and last shared with other groups).
  EXPECT_EQ(program->counters[attention.waits[0]].increments, 15);

  // Split (chosen: 78 / (4 groups x 8 sequences) = 2 parts): each part waits for the same
  // tiles; the combine waits for its two parts only, and o_proj for every combine.
  program = BuildProgram(m, ProgramOptions{/*num_sms=*/78});
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(CheckProgram(*program), absl::OkStatus());
  EXPECT_EQ(program->attention_splits, 2);
  EXPECT_EQ(Count(*program, Opcode::kAttentionPart, 6), 4 * 8 * 2);
  const Instruction& part = program->instructions[IndexOf(*program, Opcode::kAttentionPart, 2, 1)];
  EXPECT_EQ(part.part, 1);
  ASSERT_EQ(part.waits.size(), 1u);
  EXPECT_EQ(program->counters[part.waits[0]].name, "qkv.2.g0");
  const Instruction& combine = program->instructions[IndexOf(*program, Opcode::kAttentionCombine, 2)];
  ASSERT_EQ(combine.waits.size(), 1u);
  EXPECT_EQ(program->counters[combine.waits[0]].name, "attention_part.2.g0.b0");
  EXPECT_EQ(program->counters[combine.waits[0]].increments, 2);
  const Instruction& o_proj = program->instructions[IndexOf(*program, Opcode::kOProj, 2)];
  EXPECT_EQ(program->counters[o_proj.waits[0]].increments, 4 * 8);
}

// Small models, every tiling and SM count: each program is proven, and every tile size that
// does not divide the rows still covers them (a missing row would be read unwritten).
TEST(InstructionProgramTest, EverySmallConfigurationIsCorrect) {
  int programs = 0;
  for (int64_t heads : {1, 2, 4}) {
    for (int64_t kv_heads = 1; kv_heads <= heads; ++kv_heads) {
      if (heads % kv_heads != 0) continue;
      for (int sms : {1, 3, 7}) {
        // Tiles of 8 rows are one head; 24 and 40 straddle heads (and kv groups). Attention
        // unsplit, split as chosen, and split in 3 (16 positions: parts of 6, 6 and 4 at most).
        for (int64_t tile_rows : {0, 8, 16, 24, 40}) {
         for (int splits : {1, 0, 3}) {
          DecodeModel m;
          m.batch = 2;
          m.dim = heads * 8;
          m.n_layers = 2;
          m.n_heads = heads;
          m.n_kv_heads = kv_heads;
          m.head_dim = 8;
          m.ffn_hidden = 40;
          m.vocab = 50;
          m.window = 16;
          absl::StatusOr<Program> program = BuildProgram(m, ProgramOptions{sms, tile_rows, 0, splits});
          ASSERT_TRUE(program.ok()) << program.status();
          EXPECT_EQ(CheckProgram(*program), absl::OkStatus()) << "heads " << heads << "/" << kv_heads << ", " << sms << " SMs, tiles "
                                            << tile_rows << ", attention splits " << program->attention_splits;
          ++programs;
         }
        }
      }
    }
  }
  EXPECT_EQ(programs, 6 * 3 * 5 * 3);  // head counts 1/1, 2/1, 2/2, 4/1, 4/2, 4/4
}

// The checker fails programs that a real kernel would run wrongly.
class BrokenProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DecodeModel m = Llama953M(2);
    m.n_layers = 2;
    absl::StatusOr<Program> built = BuildProgram(m, ProgramOptions{/*num_sms=*/16});
    ASSERT_TRUE(built.ok()) << built.status();
    program_ = *std::move(built);
    ASSERT_EQ(CheckProgram(program_), absl::OkStatus());
  }
  void ExpectRefused(absl::string_view needle) {
    absl::Status status = CheckProgram(program_);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status.message();
  }
  Program program_;
};

TEST_F(BrokenProgramTest, AttentionThatDoesNotWaitForItsQueries) {
  program_.instructions[IndexOf(program_, Opcode::kAttention, 1, 3)].waits.clear();
  ExpectRefused("reads qkv[seq 1]");
}

TEST_F(BrokenProgramTest, ACombineThatDoesNotWaitForItsParts) {
  DecodeModel m = Llama953M(1);
  m.n_layers = 2;
  absl::StatusOr<Program> built = BuildProgram(m, ProgramOptions{/*num_sms=*/16, 0, 0, /*attention_splits=*/4});
  ASSERT_TRUE(built.ok()) << built.status();
  program_ = *std::move(built);
  ASSERT_EQ(CheckProgram(program_), absl::OkStatus());
  // Waiting for the group's q/k/v tiles (as its parts do) instead of for the parts.
  const Instruction& part = program_.instructions[IndexOf(program_, Opcode::kAttentionPart, 1, 2 * 4)];
  program_.instructions[IndexOf(program_, Opcode::kAttentionCombine, 1, 2)].waits = part.waits;
  ExpectRefused("reads attention_partials[seq 0]");
}

TEST_F(BrokenProgramTest, AnOutputProjectionThatDoesNotWaitForAttention) {
  program_.instructions[IndexOf(program_, Opcode::kOProj, 0, 5)].waits.clear();
  ExpectRefused("with no wait between them");
}

TEST_F(BrokenProgramTest, AWaitForACounterSignalledLater) {
  Instruction& qkv = program_.instructions[IndexOf(program_, Opcode::kQkv, 1)];
  qkv.waits.push_back(program_.instructions[IndexOf(program_, Opcode::kDown, 1)].signals[0]);
  ExpectRefused("it can deadlock");
}

TEST_F(BrokenProgramTest, AQueueOutOfTheSequentialOrder) {
  std::vector<int>& queue = program_.queues[3];
  ASSERT_GE(queue.size(), 2u);
  std::swap(queue[0], queue[1]);
  ExpectRefused("against the sequential order");
}

TEST_F(BrokenProgramTest, AnInstructionNoSmRuns) {
  program_.queues[5].pop_back();
  ExpectRefused("is in no SM's queue");
}

TEST_F(BrokenProgramTest, ACounterThatNeverReachesItsCount) {
  program_.instructions[IndexOf(program_, Opcode::kGateUp, 0, 2)].signals.clear();
  ExpectRefused("is declared to get");
}

// Write after read: an instruction that overwrites a value another SM may still be reading.
TEST(ProgramCheckTest, AnOverwriteOfAValueStillBeingRead) {
  DecodeModel m;
  m.batch = 1;
  m.dim = 2;
  m.n_layers = 1;
  m.n_heads = 1;
  m.n_kv_heads = 1;
  m.head_dim = 2;
  m.ffn_hidden = 2;
  m.vocab = 2;
  m.window = 4;
  Program p;
  p.model = m;
  p.counters = {{"embed", 1}};
  Instruction embed;
  embed.opcode = Opcode::kEmbed;
  embed.accesses = {{Buffer::kTokens, -1, 0, 1, 0, 1, false}, {Buffer::kHidden, -1, 0, 1, 0, 2, true}};
  embed.signals = {0};
  embed.sm = 0;
  Instruction reader = embed;  // reads the hidden state (a norm)
  reader.opcode = Opcode::kGateUp;
  reader.accesses = {{Buffer::kHidden, -1, 0, 1, 0, 2, false}, {Buffer::kActivation, -1, 0, 1, 0, 2, true}};
  reader.signals = {};
  reader.waits = {0};
  reader.sm = 1;
  Instruction writer = reader;  // adds into the hidden state without waiting for the reader
  writer.opcode = Opcode::kDown;
  writer.accesses = {{Buffer::kHidden, -1, 0, 1, 0, 1, false}, {Buffer::kHidden, -1, 0, 1, 0, 1, true}};
  writer.sm = 2;
  p.instructions = {embed, reader, writer};
  p.queues = {{0}, {1}, {2}};
  absl::Status status = CheckProgram(p);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "overwrites hidden[seq 0][row 0], which #1 (gate_up rows [0, 0) on SM 1) reads before it"))
      << status.message();
  // On one SM the queue orders them: correct.
  p.instructions[1].sm = 0;
  p.instructions[2].sm = 0;
  p.queues = {{0, 1, 2}, {}, {}};
  EXPECT_EQ(CheckProgram(p), absl::OkStatus());
}

TEST(DecodeModelTest, InconsistentShapesAreRefusedNamingTheField) {
  DecodeModel m = Llama953M(1);
  m.n_kv_heads = 5;
  EXPECT_EQ(m.Validate().message(), "decode model: n_kv_heads 5 does not divide n_heads 16");
  m = Llama953M(1);
  m.dim = 2000;
  EXPECT_EQ(m.Validate().message(), "decode model: dim 2000 is not n_heads x head_dim = 2048");
  m = Llama953M(0);
  EXPECT_EQ(m.Validate().message(), "decode model: batch is 0, not positive");
  EXPECT_EQ(BuildProgram(m, ProgramOptions{}).status().message(), "decode model: batch is 0, not positive");
  EXPECT_EQ(BuildProgram(Llama953M(1), ProgramOptions{/*num_sms=*/0}).status().message(), "num_sms is 0, not positive");
  EXPECT_EQ(BuildProgram(Llama953M(1), ProgramOptions{132, 0, 0, /*attention_splits=*/17}).status().message(),
            "attention_splits is 17, not 0 (chosen) to 16");
}

}  // namespace
}  // namespace magi::megakernel
