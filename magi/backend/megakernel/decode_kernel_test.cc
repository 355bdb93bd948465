// The MegaKernel decode step on the GPU against the reference executor on the CPU: the same
// program, weights, caches, tokens and positions; three steps in a row with the counters never
// reset (each step's tokens are the previous step's, one position further), launched directly
// and replayed from a CUDA graph, with the weights streamed through the ring (slots of the
// default size, and slots of one widest row so that chunks split rows over warps and the
// slots' phases wrap many times per step) and read with plain loads.
#include "magi/backend/megakernel/kernel_runner.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/megakernel/program_check.h"
#include "magi/backend/megakernel/program_timeline.h"
#include "magi/backend/megakernel/reference_executor.h"
#include "magi/backend/megakernel/test_inputs.h"
#include "magi/base/gtest_printers.h"
#include "magi/base/status_macros.h"

namespace magi::megakernel {
namespace {

// A decode step's model and its tensors on the CPU (any float dtype; positions below the window).
struct StepCase {
  DecodeModel model;
  DecodeTensors host;
};

// The tiny GQA model of testdata (batch 2) with RandomInputs.
absl::StatusOr<StepCase> TinyGraphCase() {
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, testing::LoadTestGraph("decode_tiny_gqa_bf16_batch2.mir"));
  const Graph* graph = module->FindGraph("forward");
  if (graph == nullptr) return absl::NotFoundError("decode_tiny_gqa_bf16_batch2.mir has no @forward");
  MAGI_ASSIGN_OR_RETURN(DecodeGraphMatch match, MatchDecodeGraph(*graph));
  MAGI_ASSIGN_OR_RETURN(DecodeTensors host, BindDecodeTensors(match, *graph, testing::RandomInputs(*graph, match)));
  return StepCase{match.model, std::move(host)};
}

// attention_splits: ProgramOptions' (0: chosen; for the tiny model on an H100, 16 parts).
void CheckThreeSteps(bool cuda_graph, const DecodeKernelOptions& kernel = {}, int attention_splits = 0,
                     absl::StatusOr<StepCase> step_case_or = TinyGraphCase()) {
  ASSERT_TRUE(at::hasCUDA());
  ASSERT_TRUE(step_case_or.ok()) << step_case_or.status();
  const StepCase& step_case = *step_case_or;
  const DecodeModel& m = step_case.model;
  ProgramOptions options;
  options.num_sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  options.max_tile_rows = kMaxTileRows;
  options.attention_splits = attention_splits;
  absl::StatusOr<Program> program = BuildProgram(m, options);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(CheckProgram(*program), absl::OkStatus());
  std::cout << "attention splits: " << program->attention_splits << "\n";
  absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> runner =
      DecodeKernelRunner::Create(*program, at::kCUDA, kernel);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->stages_inputs(), kernel.stage_inputs);
  EXPECT_EQ((*runner)->ring_slots() > 0, kernel.stream_weights && !kernel.tensor_cores);
  EXPECT_EQ((*runner)->uses_tensor_cores(), kernel.tensor_cores);
  std::cout << "ring: " << (*runner)->ring_slots() << " slots of " << (*runner)->ring_slot_bytes() << " bytes\n";

  // The kernel's tensors in bf16 on the GPU; the reference in fp32 on the same bf16 values: the
  // kernel sums in fp32, so the two differ by summation order and by the bf16 rounding of the
  // keys and values the kernel writes. Positions low enough for three steps.
  DecodeTensors host = step_case.host;
  host.positions = host.positions % (m.window - 3);
  DecodeTensors gpu = testing::MapDecodeTensors(host, [](const at::Tensor& t) {
    return (t.is_floating_point() ? t.to(at::kBFloat16) : t).to(at::kCUDA).contiguous();
  });
  DecodeTensors cpu = testing::MapDecodeTensors(host, [](const at::Tensor& t) {
    return t.is_floating_point() ? t.to(at::kBFloat16).to(at::kFloat) : t.clone();
  });

  // Under a CUDA graph: one step run directly on a side stream first (the tensors' addresses
  // reach the device outside the capture), its effects undone, then one step captured and
  // replayed three times.
  std::unique_ptr<at::cuda::CUDAGraph> replay;
  if (cuda_graph) {
    std::vector<at::Tensor> saved;
    for (const DecodeTensors::Layer& l : gpu.layers) {
      saved.push_back(l.key_cache.clone());
      saved.push_back(l.value_cache.clone());
    }
    ASSERT_EQ((*runner)->Step(gpu), absl::OkStatus());
    for (size_t l = 0; l < gpu.layers.size(); ++l) {
      gpu.layers[l].key_cache.copy_(saved[2 * l]);
      gpu.layers[l].value_cache.copy_(saved[2 * l + 1]);
    }
    at::cuda::CUDAStream stream = at::cuda::getStreamFromPool();
    stream.synchronize();
    at::cuda::CUDAStreamGuard guard(stream);
    replay = std::make_unique<at::cuda::CUDAGraph>();
    replay->capture_begin();
    ASSERT_EQ((*runner)->Step(gpu), absl::OkStatus());
    replay->capture_end();
  }

  for (int step = 0; step < 3; ++step) {
    // Each step from the kernel's caches, so that rounding does not compound over steps.
    for (size_t l = 0; l < gpu.layers.size(); ++l) {
      cpu.layers[l].key_cache.copy_(gpu.layers[l].key_cache.cpu());
      cpu.layers[l].value_cache.copy_(gpu.layers[l].value_cache.cpu());
    }
    absl::StatusOr<ReferenceResult> expected = RunReference(*program, cpu);
    ASSERT_TRUE(expected.ok()) << expected.status();
    if (cuda_graph) {
      replay->replay();
    } else {
      ASSERT_EQ((*runner)->Step(gpu), absl::OkStatus()) << "step " << step;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "step " << step;

    // Within 1% of the largest logit, and a different next token only at a near-tie.
    const at::Tensor got = (*runner)->logits().cpu().reshape({m.batch, 1, m.vocab});
    const at::Tensor want = expected->logits.to(at::kFloat);
    const double scale = want.abs().max().item<double>();
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-2 * scale) << "step " << step;
    const at::Tensor tokens = (*runner)->next_token().cpu();
    for (int64_t b = 0; b < m.batch; ++b) {
      const int64_t mine = tokens[b].item<int64_t>(), theirs = expected->next_token[b].item<int64_t>();
      if (mine != theirs) {
        EXPECT_LE(std::abs(want[b][0][mine].item<double>() - want[b][0][theirs].item<double>()), 1e-2 * scale)
            << "step " << step << ", sequence " << b << ": token " << mine << " against " << theirs;
      }
    }
    for (size_t l = 0; l < gpu.layers.size(); ++l) {
      for (const auto& [mine, theirs] : {std::make_pair(gpu.layers[l].key_cache, cpu.layers[l].key_cache),
                                         std::make_pair(gpu.layers[l].value_cache, cpu.layers[l].value_cache)}) {
        // The step's keys and values: the reference's fp32, the kernel's rounded to bf16.
        const at::Tensor diff = (mine.cpu().to(at::kFloat) - theirs).abs().max();
        EXPECT_LE(diff.item<double>(), 1e-2 * theirs.abs().max().item<double>()) << "layer " << l;
      }
    }
    // The next step: the reference's tokens (both sides), one position further.
    cpu.tokens.copy_(expected->next_token.reshape_as(cpu.tokens));
    gpu.tokens.copy_(cpu.tokens);
    cpu.positions.add_(1);
    gpu.positions.add_(1);
  }
  // The kernel's clock records of the last step: one per instruction, in order on each SM.
  absl::StatusOr<std::vector<InstructionTimes>> times = (*runner)->LastStepTimeline();
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_EQ(CheckTimeline(*program, *times), absl::OkStatus());
  for (const std::vector<int>& queue : program->queues) {
    for (size_t k = 1; k < queue.size(); ++k) {
      EXPECT_LE((*times)[queue[k - 1]].end, (*times)[queue[k]].wait_begin) << "instruction #" << queue[k];
    }
  }
  std::cout << SummarizeTimeline(*program, *times) << std::flush;
}

TEST(DecodeKernelTest, ThreeStepsEqualTheReferenceExecutor) { CheckThreeSteps(/*cuda_graph=*/false); }
TEST(DecodeKernelTest, ThreeReplaysOfACudaGraphEqualTheReferenceExecutor) { CheckThreeSteps(/*cuda_graph=*/true); }

// Slots of one widest row (the tiny model's down rows: 2 x ffn bytes, rounded up to 128) and
// only two of them: a chunk is a row or a few, split over the warps, and each slot is refilled
// hundreds of times per step.
TEST(DecodeKernelTest, ThreeStepsThroughATwoSlotRingOfSmallSlotsEqualTheReferenceExecutor) {
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_gqa_bf16_batch2.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(*(*module)->FindGraph("forward"));
  ASSERT_TRUE(match.ok()) << match.status();
  DecodeKernelOptions kernel;
  kernel.ring_slot_bytes = static_cast<int>((2 * std::max(match->model.dim, match->model.ffn_hidden) + 127) / 128 * 128);
  kernel.max_ring_slots = 2;
  CheckThreeSteps(/*cuda_graph=*/true, kernel);
}

// Attention unsplit (one instruction per kv group and sequence), and split in 3 parts.
TEST(DecodeKernelTest, ThreeStepsWithAttentionUnsplitEqualTheReferenceExecutor) {
  CheckThreeSteps(/*cuda_graph=*/false, {}, /*attention_splits=*/1);
}
TEST(DecodeKernelTest, ThreeStepsWithAttentionInThreePartsEqualTheReferenceExecutor) {
  CheckThreeSteps(/*cuda_graph=*/false, {}, /*attention_splits=*/3);
}

// Plain vector loads of the weights, the inputs staged.
TEST(DecodeKernelTest, ThreeStepsWithoutTheRingEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.stream_weights = false;
  CheckThreeSteps(/*cuda_graph=*/false, kernel);
}

// The kernel's first form: plain loads, every row reading its input from L2, attention unsplit.
TEST(DecodeKernelTest, ThreeStepsWithoutStagedInputsOrTheRingEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.stage_inputs = false;
  kernel.stream_weights = false;
  CheckThreeSteps(/*cuda_graph=*/false, kernel, /*attention_splits=*/1);
}

// Batch 8 (the kernel's most) on a model of other shapes (256 wide, 4 heads of 64 over 2 kv
// heads, ffn 512, vocab 301, 3 layers): four rows per warp on the plain path (the LM head's last
// tile of 13 rows ends in a group of one row and three past the tile), the ring, and the
// attention split in 8 parts on an H100.
StepCase Batch8Case() {
  DecodeModel m;
  m.batch = 8;
  m.dim = 256;
  m.n_layers = 3;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 64;
  m.ffn_hidden = 512;
  m.vocab = 301;
  m.window = 48;
  return {m, testing::RandomDecodeTensors(m)};
}

TEST(DecodeKernelTest, ThreeStepsAtBatch8EqualTheReferenceExecutor) {
  CheckThreeSteps(/*cuda_graph=*/true, {}, 0, Batch8Case());
}
TEST(DecodeKernelTest, ThreeStepsAtBatch8WithPlainLoadsAndAttentionUnsplitEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.stream_weights = false;
  CheckThreeSteps(/*cuda_graph=*/false, kernel, /*attention_splits=*/1, Batch8Case());
}
// Four rows per warp with every input computed from L2 (no staging).
TEST(DecodeKernelTest, ThreeStepsAtBatch8InTheFirstFormEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.stage_inputs = false;
  kernel.stream_weights = false;
  CheckThreeSteps(/*cuda_graph=*/false, kernel, /*attention_splits=*/1, Batch8Case());
}

// The tensor cores: inputs staged in bf16, 16-row groups times the sequences (the tiny model's
// 2, whose down projection's 176 columns end in half a 32-wide block; the batch-8 model's 8,
// whose LM head's last tile is 13 rows of a 16-row group).
TEST(DecodeKernelTest, ThreeStepsOnTheTensorCoresEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.tensor_cores = true;
  CheckThreeSteps(/*cuda_graph=*/true, kernel);
}
TEST(DecodeKernelTest, ThreeStepsAtBatch8OnTheTensorCoresEqualTheReferenceExecutor) {
  DecodeKernelOptions kernel;
  kernel.tensor_cores = true;
  CheckThreeSteps(/*cuda_graph=*/false, kernel, 0, Batch8Case());
}

TEST(DecodeKernelTest, RingOptionsOutOfRangeAreRefusedNamingTheLimits) {
  ASSERT_TRUE(at::hasCUDA());
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_gqa_bf16_batch2.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(*(*module)->FindGraph("forward"));
  ASSERT_TRUE(match.ok()) << match.status();
  ProgramOptions options;
  options.num_sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  options.max_tile_rows = kMaxTileRows;
  absl::StatusOr<Program> program = BuildProgram(match->model, options);
  ASSERT_TRUE(program.ok()) << program.status();
  for (const auto& [slot_bytes, slots] : {std::make_pair(100, 4), std::make_pair(128, 4), std::make_pair(0, 1),
                                          std::make_pair(0, kMaxRingSlots + 1)}) {
    DecodeKernelOptions kernel;
    kernel.ring_slot_bytes = slot_bytes;
    kernel.max_ring_slots = slots;
    absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> runner =
        DecodeKernelRunner::Create(*program, at::kCUDA, kernel);
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument) << slot_bytes << " " << slots;
    EXPECT_THAT(std::string(runner.status().message()), ::testing::HasSubstr("the weight ring takes slots"));
  }
}

}  // namespace
}  // namespace magi::megakernel
