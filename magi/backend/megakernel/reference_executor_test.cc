// The instruction program of a matched decode graph, run by the reference executor, against
// the graph itself run by the interpreter on the same inputs: the logits, the next tokens and
// the updated caches agree (within the rounding of other summation orders), and every order
// the program's waits allow gives bitwise the same step as the sequential order.
#include "magi/backend/megakernel/reference_executor.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "gtest/gtest.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/backend/megakernel/test_inputs.h"

namespace magi::megakernel {
namespace {

using testing::Clones;
using testing::MaxDiff;
using testing::MaxAbs;

void CheckAgainstTheInterpreter(absl::string_view file, double tolerance, int attention_splits) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "the graphs were dumped with LibTorch 2.12, whose CPU attention op LibTorch 1.13 lacks";
#endif
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph(file);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("forward");
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(graph);
  ASSERT_TRUE(match.ok()) << match.status();
  absl::StatusOr<Program> program =
      BuildProgram(match->model, ProgramOptions{/*num_sms=*/7, 0, 0, attention_splits});
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->attention_splits, attention_splits);
  const std::vector<at::Tensor> inputs = testing::RandomInputs(graph, *match);

  absl::StatusOr<std::unique_ptr<TorchExecutable>> interpreter = CompileForTorch("interpreter", **module, "forward");
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  absl::StatusOr<std::vector<at::Tensor>> expected = (*interpreter)->Run(Clones(inputs));
  ASSERT_TRUE(expected.ok()) << expected.status();
  // The graph's outputs: the logits, each layer's key and value caches, the next token.
  const size_t layers = match->layers.size();
  ASSERT_EQ(expected->size(), 2 + 2 * layers);
  const at::Tensor& logits = (*expected)[0];
  const at::Tensor& next_token = expected->back();

  ReferenceResult sequential;
  std::vector<at::Tensor> sequential_caches;
  for (uint64_t seed : {0, 1, 2, 3}) {
    std::vector<at::Tensor> run_inputs = Clones(inputs);
    absl::StatusOr<DecodeTensors> tensors = BindDecodeTensors(*match, graph, run_inputs);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    absl::StatusOr<ReferenceResult> result = RunReference(*program, *tensors, seed);
    ASSERT_TRUE(result.ok()) << result.status();
    std::vector<at::Tensor> caches;
    for (const DecodeTensors::Layer& layer : tensors->layers) {
      caches.push_back(layer.key_cache);
      caches.push_back(layer.value_cache);
    }
    if (seed == 0) {
      const double scale = MaxAbs(logits);
      EXPECT_LE(MaxDiff(result->logits, logits), tolerance * scale) << file << ": logits";
      EXPECT_TRUE(at::equal(result->next_token, next_token.reshape({-1}))) << file << ": next tokens";
      for (size_t i = 0; i < caches.size(); ++i) {
        EXPECT_LE(MaxDiff(caches[i], (*expected)[1 + i]), tolerance * MaxAbs((*expected)[1 + i])) << file << ": cache " << i;
      }
      sequential = *result;
      sequential_caches = caches;
      continue;
    }
    EXPECT_NE(result->order, sequential.order) << "seed " << seed << " ran the sequential order";
    EXPECT_TRUE(at::equal(result->logits, sequential.logits)) << file << ", seed " << seed;
    EXPECT_TRUE(at::equal(result->next_token, sequential.next_token)) << file << ", seed " << seed;
    for (size_t i = 0; i < caches.size(); ++i) EXPECT_TRUE(at::equal(caches[i], sequential_caches[i])) << "cache " << i;
  }
}

TEST(ReferenceExecutorTest, TheTinyDecodeStepInF32) { CheckAgainstTheInterpreter("decode_tiny_f32.mir", 1e-5, 1); }

// The positions split in 3 parts per (kv group, sequence), combined: the same numbers within
// fp32 rounding (random positions: some sequences' last part is empty).
TEST(ReferenceExecutorTest, TheTinyDecodeStepInF32WithAttentionSplit) {
  CheckAgainstTheInterpreter("decode_tiny_f32.mir", 1e-5, 3);
}

// bf16: each tile and the interpreter round at other points (a norm per tile, the attention
// by kv group instead of ATen's fused kernel): within 2% of the largest value.
TEST(ReferenceExecutorTest, GroupedQueryAttentionInBf16AtBatchTwo) {
  CheckAgainstTheInterpreter("decode_tiny_gqa_bf16_batch2.mir", 2e-2, 1);
}

TEST(ReferenceExecutorTest, GroupedQueryAttentionInBf16AtBatchTwoWithAttentionSplit) {
  CheckAgainstTheInterpreter("decode_tiny_gqa_bf16_batch2.mir", 2e-2, 3);
}

}  // namespace
}  // namespace magi::megakernel
