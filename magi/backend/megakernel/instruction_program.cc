#include "magi/backend/megakernel/instruction_program.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace magi::megakernel {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per tile: the smallest multiple of `granule` that splits `rows` into at most `sms` tiles.
int64_t AutoTileRows(int64_t rows, int64_t granule, int sms) {
  return std::max<int64_t>(granule, CeilDiv(CeilDiv(rows, sms), granule) * granule);
}

class Builder {
 public:
  Builder(const DecodeModel& model, const ProgramOptions& options) : m_(model), options_(options) {
    program_.model = model;
    program_.options = options;
  }

  Program Build() {
    int splits = options_.attention_splits;
    if (splits == 0) {
      splits = static_cast<int>(std::clamp<int64_t>(options_.num_sms / (m_.n_kv_heads * m_.batch), 1,
                                                    kMaxAttentionSplits));
    }
    program_.attention_splits = static_cast<int>(std::min<int64_t>(splits, m_.window));
    const int embed_done = AddCounter("embed");
    ForTiles(m_.dim, TileRows(m_.dim), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kEmbed, -1, r0, r1, 0, m_.batch, (r1 - r0) * m_.batch * m_.weight_bytes_per_element);
      in.accesses = {Read(Buffer::kTokens, -1, 0, m_.batch, 0, 1), Write(Buffer::kHidden, -1, 0, m_.batch, r0, r1)};
      Signal(in, embed_done);
    });
    int hidden_ready = embed_done;
    for (int layer = 0; layer < m_.n_layers; ++layer) hidden_ready = AddLayer(layer, hidden_ready);
    const int logits_done = AddCounter("logits");
    ForTiles(m_.vocab, TileRows(m_.vocab), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kLogits, -1, r0, r1, 0, m_.batch, MatrixBytes(r1 - r0, m_.dim) + NormBytes());
      in.accesses = {Read(Buffer::kHidden, -1, 0, m_.batch, 0, m_.dim), Write(Buffer::kLogits, -1, 0, m_.batch, r0, r1)};
      Wait(in, hidden_ready);
      Signal(in, logits_done);
    });
    for (int64_t b = 0; b < m_.batch; ++b) {
      Instruction& in = Add(Opcode::kArgmax, -1, 0, m_.vocab, b, b + 1, 0);
      in.accesses = {Read(Buffer::kLogits, -1, b, b + 1, 0, m_.vocab), Write(Buffer::kTokens, -1, b, b + 1, 0, 1)};
      Wait(in, logits_done);
    }
    Place();
    return std::move(program_);
  }

 private:
  // Adds layer `layer`'s instructions after the counter `hidden_ready` (the hidden state's
  // last writers); returns the counter of its own last writers.
  int AddLayer(int layer, int hidden_ready) {
    const int64_t hd = m_.head_dim, group = m_.group_size(), qkv_rows = m_.qkv_rows();
    // The kv group of concatenated head h: q heads h / group, then k heads, then v heads.
    auto group_of_head = [&](int64_t h) {
      return h < m_.n_heads ? h / group : (h < m_.n_heads + m_.n_kv_heads ? h - m_.n_heads : h - m_.n_heads - m_.n_kv_heads);
    };
    std::vector<int> qkv_done(m_.n_kv_heads);
    for (int64_t g = 0; g < m_.n_kv_heads; ++g) qkv_done[g] = AddCounter(absl::StrCat("qkv.", layer, ".g", g));
    // Plain row tiles of the concatenated projection (no RoPE here: attention rotates q and k,
    // and writes k and v into the cache), so they spread over every SM like the other matrices.
    ForTiles(qkv_rows, TileRows(qkv_rows), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kQkv, layer, r0, r1, 0, m_.batch, MatrixBytes(r1 - r0, m_.dim) + NormBytes());
      in.accesses = {Read(Buffer::kHidden, -1, 0, m_.batch, 0, m_.dim), Write(Buffer::kQkv, -1, 0, m_.batch, r0, r1)};
      Wait(in, hidden_ready);
      std::vector<int64_t> groups;
      for (int64_t h = r0 / hd; h * hd < r1; ++h) groups.push_back(group_of_head(h));
      std::sort(groups.begin(), groups.end());
      groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
      for (int64_t g : groups) Signal(in, qkv_done[g]);
    });
    const int attention_done = AddCounter(absl::StrCat("attention.", layer));
    const int64_t cache_bytes = 2 * hd * (m_.window / 2) * m_.weight_bytes_per_element;  // k and v, half the window
    const int64_t k_row = m_.n_heads * hd, v_row = (m_.n_heads + m_.n_kv_heads) * hd;
    const int splits = program_.attention_splits;
    // The combines come after every part of the layer in the sequential order: a combine
    // queued before another group's part would hold that part (and its SM) until all of its
    // own parts are done, chaining the groups one after another.
    std::vector<std::function<void()>> combines;
    for (int64_t g = 0; g < m_.n_kv_heads; ++g) {
      for (int64_t b = 0; b < m_.batch; ++b) {
        const Access q = Read(Buffer::kQkv, -1, b, b + 1, g * group * hd, (g + 1) * group * hd),
                     k = Read(Buffer::kQkv, -1, b, b + 1, k_row + g * hd, k_row + (g + 1) * hd),
                     v = Read(Buffer::kQkv, -1, b, b + 1, v_row + g * hd, v_row + (g + 1) * hd),
                     keys = Read(Buffer::kKeyCache, layer, b, b + 1, g * hd, (g + 1) * hd),
                     values = Read(Buffer::kValueCache, layer, b, b + 1, g * hd, (g + 1) * hd),
                     write_keys = Write(Buffer::kKeyCache, layer, b, b + 1, g * hd, (g + 1) * hd),
                     write_values = Write(Buffer::kValueCache, layer, b, b + 1, g * hd, (g + 1) * hd),
                     out = Write(Buffer::kAttention, -1, b, b + 1, g * group * hd, (g + 1) * group * hd);
        if (splits == 1) {
          // Rotates its q heads and its k head, writes k and v into the cache at the step's
          // position, then attends over the cache up to it.
          Instruction& in = Add(Opcode::kAttention, layer, g, g + 1, b, b + 1, cache_bytes);
          in.accesses = {q, k, v, write_keys, write_values, keys, values, out};
          Wait(in, qkv_done[g]);
          Signal(in, attention_done);
          continue;
        }
        // The parts read the cache only before the step's position (its key and value come
        // from q/k/v), so the combine may write it once they are done.
        const int parts_done = AddCounter(absl::StrCat("attention_part.", layer, ".g", g, ".b", b));
        const int64_t partial_rows = hd + 2;
        for (int part = 0; part < splits; ++part) {
          Instruction& in = Add(Opcode::kAttentionPart, layer, g, g + 1, b, b + 1, CeilDiv(cache_bytes, splits));
          in.part = part;
          in.accesses = {q, k, v, keys, values};
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            const int64_t row = (h * splits + part) * partial_rows;
            in.accesses.push_back(Write(Buffer::kAttentionPartials, -1, b, b + 1, row, row + partial_rows));
          }
          Wait(in, qkv_done[g]);
          Signal(in, parts_done);
        }
        combines.push_back([this, layer, g, b, k, v, write_keys, write_values, out, splits, group, hd, partial_rows,
                             parts_done, attention_done] {
          Instruction& in = Add(Opcode::kAttentionCombine, layer, g, g + 1, b, b + 1, 0);
          in.accesses = {k, v,
                         Read(Buffer::kAttentionPartials, -1, b, b + 1, g * group * splits * partial_rows,
                              (g + 1) * group * splits * partial_rows),
                         write_keys, write_values, out};
          Wait(in, parts_done);
          Signal(in, attention_done);
        });
      }
    }
    for (const std::function<void()>& combine : combines) combine();
    const int o_done = AddCounter(absl::StrCat("o_proj.", layer));
    ForTiles(m_.dim, TileRows(m_.dim), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kOProj, layer, r0, r1, 0, m_.batch, MatrixBytes(r1 - r0, m_.dim));
      in.accesses = {Read(Buffer::kAttention, -1, 0, m_.batch, 0, m_.dim), Read(Buffer::kHidden, -1, 0, m_.batch, r0, r1),
                     Write(Buffer::kHidden, -1, 0, m_.batch, r0, r1)};
      Wait(in, attention_done);
      Signal(in, o_done);
    });
    const int gate_up_done = AddCounter(absl::StrCat("gate_up.", layer));
    ForTiles(m_.ffn_hidden, TileRows(m_.ffn_hidden), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kGateUp, layer, r0, r1, 0, m_.batch, 2 * MatrixBytes(r1 - r0, m_.dim) + NormBytes());
      in.accesses = {Read(Buffer::kHidden, -1, 0, m_.batch, 0, m_.dim), Write(Buffer::kActivation, -1, 0, m_.batch, r0, r1)};
      Wait(in, o_done);
      Signal(in, gate_up_done);
    });
    const int down_done = AddCounter(absl::StrCat("down.", layer));
    ForTiles(m_.dim, TileRows(m_.dim), [&](int64_t r0, int64_t r1) {
      Instruction& in = Add(Opcode::kDown, layer, r0, r1, 0, m_.batch, MatrixBytes(r1 - r0, m_.ffn_hidden));
      in.accesses = {Read(Buffer::kActivation, -1, 0, m_.batch, 0, m_.ffn_hidden),
                     Read(Buffer::kHidden, -1, 0, m_.batch, r0, r1), Write(Buffer::kHidden, -1, 0, m_.batch, r0, r1)};
      Wait(in, gate_up_done);
      Signal(in, down_done);
    });
    return down_done;
  }

  int64_t TileRows(int64_t rows) const {
    if (options_.tile_rows > 0) return options_.tile_rows;
    const int64_t chosen = AutoTileRows(rows, 16, options_.num_sms);
    return options_.max_tile_rows > 0 ? std::max<int64_t>(16, std::min(chosen, options_.max_tile_rows / 16 * 16)) : chosen;
  }
  int64_t MatrixBytes(int64_t rows, int64_t cols) const { return rows * cols * m_.weight_bytes_per_element; }
  int64_t NormBytes() const { return m_.dim * m_.weight_bytes_per_element; }

  static void ForTiles(int64_t count, int64_t per_tile, const std::function<void(int64_t, int64_t)>& body) {
    for (int64_t begin = 0; begin < count; begin += per_tile) body(begin, std::min(count, begin + per_tile));
  }

  int AddCounter(std::string name) {
    program_.counters.push_back({std::move(name), 0});
    return static_cast<int>(program_.counters.size()) - 1;
  }
  Instruction& Add(Opcode opcode, int layer, int64_t r0, int64_t r1, int64_t b0, int64_t b1, int64_t bytes) {
    Instruction& in = program_.instructions.emplace_back();
    in.opcode = opcode;
    in.layer = layer;
    in.row_begin = r0;
    in.row_end = r1;
    in.batch_begin = b0;
    in.batch_end = b1;
    in.bytes = bytes;
    return in;
  }
  void Wait(Instruction& in, int counter) { in.waits.push_back(counter); }
  void Signal(Instruction& in, int counter) {
    in.signals.push_back(counter);
    ++program_.counters[counter].increments;
  }
  static Access Read(Buffer buffer, int layer, int64_t b0, int64_t b1, int64_t r0, int64_t r1) {
    return Access{buffer, layer, b0, b1, r0, r1, /*write=*/false};
  }
  static Access Write(Buffer buffer, int layer, int64_t b0, int64_t b1, int64_t r0, int64_t r1) {
    return Access{buffer, layer, b0, b1, r0, r1, /*write=*/true};
  }

  // In the sequential order, each instruction on the SM with the least bytes so far (the
  // lowest index on a tie) among those with no instruction of its stage (opcode and layer) yet,
  // while any is left: a stage of at most num_sms instructions runs at most one per SM, so no
  // SM runs two of a stage's tiles one after the other while the next stage waits for both.
  void Place() {
    using Load = std::pair<int64_t, int>;
    std::set<Load> free;  // SMs without an instruction of the current stage, by load
    std::set<Load> used;  // SMs with one
    for (int sm = 0; sm < options_.num_sms; ++sm) free.insert({0, sm});
    program_.queues.assign(options_.num_sms, {});
    std::pair<Opcode, int> stage = {Opcode::kEmbed, -2};
    for (size_t i = 0; i < program_.instructions.size(); ++i) {
      Instruction& in = program_.instructions[i];
      if (std::make_pair(in.opcode, in.layer) != stage || free.empty()) {
        stage = {in.opcode, in.layer};
        free.insert(used.begin(), used.end());
        used.clear();
      }
      const auto [load, sm] = *free.begin();
      free.erase(free.begin());
      in.sm = sm;
      program_.queues[sm].push_back(static_cast<int>(i));
      // Every instruction costs a little beyond its bytes (its waits, its launch in the queue),
      // so that byte-free ones (argmax) spread too.
      used.insert({load + in.bytes + 1, sm});
    }
  }

  const DecodeModel& m_;
  const ProgramOptions& options_;
  Program program_;
};

}  // namespace

absl::string_view OpcodeName(Opcode opcode) {
  switch (opcode) {
    case Opcode::kEmbed: return "embed";
    case Opcode::kQkv: return "qkv";
    case Opcode::kAttention: return "attention";
    case Opcode::kOProj: return "o_proj";
    case Opcode::kGateUp: return "gate_up";
    case Opcode::kDown: return "down";
    case Opcode::kLogits: return "logits";
    case Opcode::kArgmax: return "argmax";
    case Opcode::kAttentionPart: return "attention_part";
    case Opcode::kAttentionCombine: return "attention_combine";
  }
  return "?";
}

absl::string_view BufferName(Buffer buffer) {
  switch (buffer) {
    case Buffer::kTokens: return "tokens";
    case Buffer::kHidden: return "hidden";
    case Buffer::kQkv: return "qkv";
    case Buffer::kAttention: return "attention";
    case Buffer::kActivation: return "activation";
    case Buffer::kLogits: return "logits";
    case Buffer::kKeyCache: return "key_cache";
    case Buffer::kValueCache: return "value_cache";
    case Buffer::kAttentionPartials: return "attention_partials";
  }
  return "?";
}

int64_t BufferRows(const Program& program, Buffer buffer) {
  const DecodeModel& model = program.model;
  switch (buffer) {
    case Buffer::kTokens: return 1;
    case Buffer::kHidden: return model.dim;
    case Buffer::kQkv: return model.qkv_rows();
    case Buffer::kAttention: return model.n_heads * model.head_dim;
    case Buffer::kActivation: return model.ffn_hidden;
    case Buffer::kLogits: return model.vocab;
    case Buffer::kKeyCache:
    case Buffer::kValueCache: return model.n_kv_heads * model.head_dim;
    case Buffer::kAttentionPartials: return model.n_heads * program.attention_splits * (model.head_dim + 2);
  }
  return 0;
}

std::string Instruction::DebugString() const {
  std::string what = absl::StrCat(OpcodeName(opcode), layer >= 0 ? absl::StrCat(" layer ", layer) : "");
  if (opcode == Opcode::kAttention || opcode == Opcode::kAttentionCombine) {
    absl::StrAppend(&what, " kv group ", row_begin, " sequence ", batch_begin);
  } else if (opcode == Opcode::kAttentionPart) {
    absl::StrAppend(&what, " kv group ", row_begin, " sequence ", batch_begin, " part ", part);
  } else if (opcode == Opcode::kArgmax) {
    absl::StrAppend(&what, " sequence ", batch_begin);
  } else {
    absl::StrAppend(&what, " rows [", row_begin, ", ", row_end, ")");
  }
  if (sm >= 0) absl::StrAppend(&what, " on SM ", sm);
  return what;
}

std::string Program::Summary() const {
  struct Stage {
    int instructions = 0;
    int64_t rows = 0, bytes = 0;
  };
  std::map<Opcode, Stage> stages;
  for (const Instruction& in : instructions) {
    Stage& s = stages[in.opcode];
    ++s.instructions;
    s.rows = std::max(s.rows, in.row_end - in.row_begin);
    s.bytes += in.bytes;
  }
  std::string out = absl::StrFormat("%d instructions, %d counters, %d SMs; weights %d bytes per step\n",
                                    instructions.size(), counters.size(), queues.size(), model.weight_bytes());
  for (const auto& [opcode, s] : stages) {
    absl::StrAppendFormat(&out, "  %-17s %6d instructions, %5d rows per tile, %12d bytes\n", OpcodeName(opcode),
                          s.instructions, s.rows, s.bytes);
  }
  int64_t most = 0, total = 0;
  for (const std::vector<int>& queue : queues) {
    int64_t bytes = 0;
    for (int i : queue) bytes += instructions[i].bytes;
    most = std::max(most, bytes);
    total += bytes;
  }
  const double mean = queues.empty() ? 0 : static_cast<double>(total) / queues.size();
  absl::StrAppendFormat(&out, "  SM bytes: most %d, mean %.0f (%.3fx)\n", most, mean, mean > 0 ? most / mean : 0.0);
  return out;
}

absl::StatusOr<Program> BuildProgram(const DecodeModel& model, const ProgramOptions& options) {
  if (absl::Status valid = model.Validate(); !valid.ok()) return valid;
  if (options.num_sms <= 0) return absl::InvalidArgumentError(absl::StrCat("num_sms is ", options.num_sms, ", not positive"));
  if (options.tile_rows < 0 || options.max_tile_rows < 0) {
    return absl::InvalidArgumentError("tile_rows and max_tile_rows must not be negative (0: chosen)");
  }
  if (options.attention_splits < 0 || options.attention_splits > kMaxAttentionSplits) {
    return absl::InvalidArgumentError(absl::StrCat("attention_splits is ", options.attention_splits, ", not 0 (chosen) to ",
                                                   kMaxAttentionSplits));
  }
  return Builder(model, options).Build();
}

}  // namespace magi::megakernel
