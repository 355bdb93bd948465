// The instruction program of a MegaKernel decode step: what each streaming multiprocessor
// (SM) of the persistent kernel runs, in which order, and which counters in global memory
// order the SMs against each other (docs/megakernel.md).
//
// The step of a DecodeModel is a fixed list of instructions; running them one by one in
// that order ("the sequential order") is the step's meaning:
//
//   embed                      rows of the hidden state from the token embedding
//   per layer L:
//     qkv        (L, rows)     RMSNorm of the hidden state (recomputed by every tile: `dim`
//                              values), rows of the concatenated q/k/v projection
//     attention  (L, g, b)     RoPE on sequence b's query heads of kv group g and on its key
//                              head, the key and value written into the cache at the step's
//                              position, then those query heads over the cache
//     or, with the positions split in S parts (Program::attention_splits > 1):
//     attention_part (L, g, b, s)  the same heads over part s of the positions 0..position
//                              (the step's own key and value from q/k/v, the rest from the
//                              cache): each head's running max, sum of exponentials and
//                              weighted values, into the partials
//     attention_combine (L, g, b)  the key and value written into the cache, the S parts of
//                              each head combined (flash-decoding's rescaling) into its output
//     o_proj     (L, rows)     output projection rows, added to the hidden state (residual)
//     gate_up    (L, rows)     RMSNorm, gate and up rows, silu(gate) * up
//     down       (L, rows)     down projection rows, added to the hidden state
//   logits       (rows)        final RMSNorm, LM head rows
//   argmax       (b)           sequence b's next token
//
// A matrix instruction ("tile") computes its rows for all `batch` sequences, so each weight
// is read once per step. Each instruction waits for counters and, when done, increments
// counters; a wait is always for every increment a counter gets in the step (so "all qkv
// tiles of group g of layer L are done"), which is what makes the program checkable
// (program_check.h). Instructions are placed on SMs stage by stage, each on the SM with the
// least work so far (weight bytes it streams; attention: the cache bytes it reads at half the
// window) among those with no instruction of its stage yet; each SM runs its queue in the
// sequential order, so the earliest unfinished instruction can always run and the kernel
// cannot deadlock.
#ifndef MAGI_BACKEND_MEGAKERNEL_INSTRUCTION_PROGRAM_H_
#define MAGI_BACKEND_MEGAKERNEL_INSTRUCTION_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/backend/megakernel/decode_model.h"

namespace magi::megakernel {

enum class Opcode : uint8_t {
  kEmbed,
  kQkv,
  kAttention,
  kOProj,
  kGateUp,
  kDown,
  kLogits,
  kArgmax,
  kAttentionPart,
  kAttentionCombine,
};
absl::string_view OpcodeName(Opcode opcode);

// The step's state. Every buffer holds `batch` sequences of its rows; the caches are per
// layer (the rows of one position: kv heads x head_dim). Tokens and the caches' earlier
// positions are the step's inputs; the rest is written before it is read.
// kAttentionPartials: per sequence, per query head and part of the positions, the part's
// max score, sum of exponentials and head_dim weighted values ([n_heads][S][head_dim + 2]).
enum class Buffer : uint8_t {
  kTokens,
  kHidden,
  kQkv,
  kAttention,
  kActivation,
  kLogits,
  kKeyCache,
  kValueCache,
  kAttentionPartials,
};
absl::string_view BufferName(Buffer buffer);

// Rows [row_begin, row_end) of sequences [batch_begin, batch_end) of a buffer (of `layer`
// for the caches, else -1), read or written.
struct Access {
  Buffer buffer = Buffer::kHidden;
  int layer = -1;
  int64_t batch_begin = 0, batch_end = 0;
  int64_t row_begin = 0, row_end = 0;
  bool write = false;
};

struct Instruction {
  Opcode opcode = Opcode::kEmbed;
  int layer = -1;                    // -1 for embed, logits and argmax
  int64_t row_begin = 0, row_end = 0;  // output rows; attention: the kv group [g, g + 1)
  int64_t batch_begin = 0, batch_end = 0;  // sequences it computes
  int part = 0;                      // attention_part: which part of the positions
  int64_t bytes = 0;                 // what it streams from memory: weights, or cache at half the window
  std::vector<int> waits;            // counters it waits for (each to its full count)
  std::vector<int> signals;          // counters it increments when done
  std::vector<Access> accesses;
  int sm = -1;                       // the SM that runs it
  std::string DebugString() const;   // "qkv layer 3 rows [128, 256) batch [0, 8) on SM 5"
};

struct Counter {
  std::string name;  // "qkv.3.g1": the qkv tiles of layer 3 that touch kv group 1
  int increments = 0;  // instructions that signal it per step
};

struct ProgramOptions {
  int num_sms = 132;  // an H100 SXM
  // Rows per tile of the matrix stages (q/k/v included); 0: the smallest multiple of 16 that
  // makes at most num_sms tiles.
  int64_t tile_rows = 0;
  // At most this many rows per chosen tile (0: no bound); the CUDA kernel's is kMaxTileRows
  // (device_records.h).
  int64_t max_tile_rows = 0;
  // Parts the positions of each (kv group, sequence) are split into, each attended on its own
  // SM and then combined; 1: one attention instruction per (kv group, sequence). 0: as many
  // as keep every SM busy (num_sms / (n_kv_heads x batch), 1 to kMaxAttentionSplits).
  int attention_splits = 0;
};

inline constexpr int kMaxAttentionSplits = 16;

struct Program {
  DecodeModel model;
  ProgramOptions options;
  std::vector<Instruction> instructions;  // the sequential order
  std::vector<Counter> counters;
  std::vector<std::vector<int>> queues;   // per SM: instruction indices, ascending
  int attention_splits = 1;               // as chosen (ProgramOptions::attention_splits)
  // One line per stage kind (instructions, rows per tile, bytes) and the SMs' balance.
  std::string Summary() const;
};

// Rows per sequence of `buffer` in `program`.
int64_t BufferRows(const Program& program, Buffer buffer);

// InvalidArgument for a model that fails Validate() or options out of range.
absl::StatusOr<Program> BuildProgram(const DecodeModel& model, const ProgramOptions& options);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_INSTRUCTION_PROGRAM_H_
