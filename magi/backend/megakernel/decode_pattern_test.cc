#include "magi/backend/megakernel/decode_pattern.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/megakernel/program_check.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi::megakernel {
namespace {

// Decode and prefill graphs of examples:generate's tiny Llama (2 layers, dim 64, 4 heads,
// ffn 176, byte vocabulary, window 32), dumped with --dump_graphs at world 1:
//   decode_tiny_f32.mir              --dtype=f32, one sequence, 4 kv heads
//   decode_tiny_gqa_bf16_batch2.mir  --dtype=bf16 --kv_heads=2 --batch_size=2 (two prompts)
//   prefill_tiny_f32.mir             the first one's prefill bucket of 16 positions
std::string Testdata(absl::string_view name) {
  absl::StatusOr<std::string> text = ReadFile(absl::StrCat("magi/backend/megakernel/testdata/", name));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

absl::StatusOr<DecodeGraphMatch> Match(const std::string& text, std::unique_ptr<Module>& module) {
  absl::StatusOr<std::unique_ptr<Module>> parsed = ParseModule(text, "test.mir");
  if (!parsed.ok()) return parsed.status();
  module = *std::move(parsed);
  const Graph* graph = module->FindGraph("forward");
  if (graph == nullptr) return absl::NotFoundError("no @forward");
  return MatchDecodeGraph(*graph);
}

TEST(DecodePatternTest, TheTinyDecodeGraph) {
  std::unique_ptr<Module> module;
  absl::StatusOr<DecodeGraphMatch> match = Match(Testdata("decode_tiny_f32.mir"), module);
  ASSERT_TRUE(match.ok()) << match.status();
  const DecodeModel& m = match->model;
  EXPECT_EQ(m.batch, 1);
  EXPECT_EQ(m.dim, 64);
  EXPECT_EQ(m.n_layers, 2);
  EXPECT_EQ(m.n_heads, 4);
  EXPECT_EQ(m.n_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 16);
  EXPECT_EQ(m.ffn_hidden, 176);
  EXPECT_EQ(m.vocab, 256);
  EXPECT_EQ(m.window, 32);
  EXPECT_EQ(m.weight_bytes_per_element, 4);
  EXPECT_EQ(match->tokens->name(), "input.0");
  EXPECT_EQ(match->positions->name(), "input.1");
  EXPECT_EQ(match->rope_cos->name(), "rope_cos");
  EXPECT_EQ(match->rope_sin->name(), "rope_sin");
  EXPECT_EQ(match->embedding->name(), "tok_embeddings.weight.shard");
  EXPECT_EQ(match->final_norm->name(), "norm.weight.shard");
  EXPECT_EQ(match->lm_head->name(), "output.weight.shard");
  ASSERT_EQ(match->layers.size(), 2u);
  const DecodeLayerBinding& layer = match->layers[1];
  EXPECT_EQ(layer.attention_norm->name(), "layers.1.attention_norm.weight.shard");
  EXPECT_EQ(layer.qkv_weight->name(), "layers.1.attention.wq.weight.shard.concat");
  EXPECT_EQ(layer.o_weight->name(), "layers.1.attention.wo.weight.shard");
  EXPECT_EQ(layer.ffn_norm->name(), "layers.1.ffn_norm.weight.shard");
  EXPECT_EQ(layer.gate_up_weight->name(), "layers.1.feed_forward.w1.weight.shard.concat");
  EXPECT_EQ(layer.down_weight->name(), "layers.1.feed_forward.w2.weight.shard");
  EXPECT_EQ(layer.key_cache->name(), "input.4");
  EXPECT_EQ(layer.value_cache->name(), "input.5");
  EXPECT_DOUBLE_EQ(layer.attention_eps, 1e-5);
  EXPECT_DOUBLE_EQ(match->final_eps, 1e-5);
  // The program of what was matched is correct in every order (on an H100's 132 SMs).
  absl::StatusOr<Program> program = BuildProgram(m, ProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(CheckProgram(*program), absl::OkStatus());
}

TEST(DecodePatternTest, GroupedQueryAttentionInBf16AtBatchTwo) {
  std::unique_ptr<Module> module;
  absl::StatusOr<DecodeGraphMatch> match = Match(Testdata("decode_tiny_gqa_bf16_batch2.mir"), module);
  ASSERT_TRUE(match.ok()) << match.status();
  EXPECT_EQ(match->model.batch, 2);
  EXPECT_EQ(match->model.n_heads, 4);
  EXPECT_EQ(match->model.n_kv_heads, 2);
  EXPECT_EQ(match->model.weight_bytes_per_element, 2);
  EXPECT_EQ(match->layers[0].key_cache->name(), "input.2");
}

// The mask as ATen converts it for cuDNN attention on the GPU: where(!visible, -65504, 0).
std::string CudnnMask(const std::string& decode, const std::string& masked_value) {
  return absl::StrReplaceAll(
      decode, {{"%where_65 = aten::where.self(%le_12, %scalar_tensor_64, %scalar_tensor_63)",
                "%not_le = aten::logical_not(%le_12) : bool[1,1,1,32]\n"
                "    %where_65 = aten::where.self(%not_le, %scalar_tensor_63, %scalar_tensor_64)"},
               {"aten::scalar_tensor(-inf,", absl::StrCat("aten::scalar_tensor(", masked_value, ",")}});
}

TEST(DecodePatternTest, TheCudnnFormOfTheMaskIsMatched) {
  std::unique_ptr<Module> module;
  const std::string decode = Testdata("decode_tiny_f32.mir");
  const std::string cudnn = CudnnMask(decode, "-65504.0");
  ASSERT_NE(cudnn, decode);
  absl::StatusOr<DecodeGraphMatch> match = Match(cudnn, module);
  EXPECT_TRUE(match.ok()) << match.status();
  // A masked value that would not vanish in the softmax is not a mask.
  match = Match(CudnnMask(decode, "-1.0"), module);
  ASSERT_FALSE(match.ok());
  EXPECT_TRUE(absl::StrContains(match.status().message(), "expected the attention mask")) << match.status();
}

// What is not a Llama decode step is declined where it stops being one.
TEST(DecodePatternTest, OtherGraphsAreDeclinedNamingWhere) {
  std::unique_ptr<Module> module;
  const std::string decode = Testdata("decode_tiny_f32.mir");
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      // A prefill: 16 positions per sequence.
      {Testdata("prefill_tiny_f32.mir"), "at %input.0: expected the tokens: a graph input [batch, 1]"},
      // GELU instead of SiLU in the MLP.
      {absl::StrReplaceAll(decode, {{"aten::silu", "aten::gelu"}}), "at %_unsafe_view_84: expected SwiGLU: aten::silu(gate) * up"},
      // A RoPE whose second half adds where it should subtract.
      {absl::StrReplaceAll(decode, {{"aten::sub.Tensor(%mul_46, %mul_45, alpha = 1)", "aten::add.Tensor(%mul_46, %mul_45, alpha = 1)"}}),
       "expected RoPE"},
      // An RMSNorm over another epsilon is fine; one that squares by 3 is not a norm.
      {absl::StrReplaceAll(decode, {{"aten::pow.Tensor_Scalar(%embedding_18, 2)", "aten::pow.Tensor_Scalar(%embedding_18, 3)"}}),
       "RMSNorm: one aten::pow.Tensor_Scalar(x, 2) of it"},
      // The causal flag set on the attention.
      {absl::StrReplaceAll(decode, {{"%index_put_62, 0.0, false, attn_mask", "%index_put_62, 0.0, true, attn_mask"}}),
       "attention with a mask, without dropout, not causal"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DecodeGraphMatch> match = Match(c.text, module);
    ASSERT_FALSE(match.ok()) << c.expected;
    EXPECT_EQ(match.status().code(), absl::StatusCode::kUnimplemented) << match.status();
    EXPECT_TRUE(absl::StrContains(match.status().message(), c.expected)) << match.status().message();
  }
}

// Embedding, final norm and LM head with no layer between: declined, not matched.
TEST(DecodePatternTest, AGraphWithoutLayersIsDeclined) {
  std::unique_ptr<Module> module;
  absl::StatusOr<DecodeGraphMatch> match = Match(R"(module @m {
  graph @forward {
    input %tokens: i64[1,1]
    input %emb: f32[16,8] {role = param}
    input %norm: f32[8] {role = param}
    input %head: f32[16,8] {role = param}
    %h = aten::embedding(%emb, %tokens, -1, false, false) : f32[1,1,8]
    %p = aten::pow.Tensor_Scalar(%h, 2) : f32[1,1,8]
    %m = aten::mean.dim(%p, [-1], true, dtype = none) : f32[1,1,1]
    %a = aten::add.Scalar(%m, 1e-05, 1) : f32[1,1,1]
    %r = aten::rsqrt(%a) : f32[1,1,1]
    %x = aten::mul.Tensor(%h, %r) : f32[1,1,8]
    %w = aten::mul.Tensor(%x, %norm) : f32[1,1,8]
    %v = aten::view(%w, [1, 8]) : f32[1,8]
    %t = aten::t(%head) : f32[8,16]strides[1,8]
    %y = aten::mm(%v, %t) : f32[1,16]
    %logits = aten::_unsafe_view(%y, [1, 1, 16]) : f32[1,1,16]
    %s = aten::select.int(%logits, 1, 0) : f32[1,16]
    %next = aten::argmax(%s, -1, false) : i64[1]
    output logits = %logits
    output next = %next
  }
}
)",
                                                 module);
  ASSERT_FALSE(match.ok());
  EXPECT_EQ(match.status().code(), absl::StatusCode::kUnimplemented) << match.status();
  EXPECT_EQ(match.status().message(), "no transformer layer was matched");
}

}  // namespace
}  // namespace magi::megakernel
