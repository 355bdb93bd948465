// The MegaKernel decode step on the GPU against the reference executor on the CPU: the same
// program, weights, caches, tokens and positions; three steps in a row with the counters never
// reset (each step's tokens are the previous step's, one position further).
#include "magi/backend/megakernel/decode_kernel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "gtest/gtest.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/device_program.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/megakernel/program_check.h"
#include "magi/backend/megakernel/reference_executor.h"
#include "magi/backend/megakernel/test_inputs.h"
#include "magi/base/gtest_printers.h"

namespace magi::megakernel {
namespace {

// Bytes on the device holding `count` records of T.
template <typename T>
at::Tensor DeviceArray(const T* data, size_t count) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(count * sizeof(T))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(bytes.data_ptr(), data, count * sizeof(T));
  return bytes.to(at::kCUDA);
}

TEST(DecodeKernelTest, ThreeStepsEqualTheReferenceExecutor) {
  ASSERT_TRUE(at::hasCUDA());
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_gqa_bf16_batch2.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("forward");
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(graph);
  ASSERT_TRUE(match.ok()) << match.status();
  const DecodeModel& m = match->model;
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ProgramOptions options;
  options.num_sms = sms;
  options.max_tile_rows = kMaxTileRows;
  absl::StatusOr<Program> program = BuildProgram(m, options);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(CheckProgram(*program), absl::OkStatus());
  absl::StatusOr<DeviceProgram> packed = PackProgram(*program);
  ASSERT_TRUE(packed.ok()) << packed.status();

  std::vector<at::Tensor> host = testing::RandomInputs(graph, *match);
  // Positions low enough for three steps.
  for (size_t i = 0; i < host.size(); ++i) {
    if (graph.inputs()[i] == match->positions) host[i] = host[i] % (m.window - 3);
  }
  std::vector<at::Tensor> device;
  for (const at::Tensor& t : host) device.push_back(t.to(at::kCUDA).contiguous());
  absl::StatusOr<DecodeTensors> cpu = BindDecodeTensors(*match, graph, host);
  absl::StatusOr<DecodeTensors> gpu = BindDecodeTensors(*match, graph, device);
  ASSERT_TRUE(cpu.ok() && gpu.ok());

  std::vector<KernelLayer> layers;
  for (const DecodeTensors::Layer& l : gpu->layers) {
    layers.push_back({l.attention_norm.data_ptr(), l.qkv.data_ptr(), l.o.data_ptr(), l.ffn_norm.data_ptr(),
                      l.gate_up.data_ptr(), l.down.data_ptr(), l.key_cache.data_ptr(), l.value_cache.data_ptr(),
                      static_cast<float>(l.attention_eps), static_cast<float>(l.ffn_eps)});
  }
  const at::Tensor layers_device = DeviceArray(layers.data(), layers.size());
  const at::Tensor instructions = DeviceArray(packed->instructions.data(), packed->instructions.size());
  const at::Tensor queue_begin = DeviceArray(packed->queue_begin.data(), packed->queue_begin.size());
  const at::Tensor queue = DeviceArray(packed->queue.data(), packed->queue.size());
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  at::Tensor counters = at::zeros({packed->num_counters}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  at::Tensor hidden = at::zeros({m.batch, m.dim}, f32), qkv = at::zeros({m.batch, m.qkv_rows()}, f32);
  at::Tensor attention = at::zeros({m.batch, m.dim}, f32), activation = at::zeros({m.batch, m.ffn_hidden}, f32);
  at::Tensor logits = at::zeros({m.batch, m.vocab}, f32);
  at::Tensor next_token = at::zeros({m.batch}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));

  for (uint32_t step = 0; step < 3; ++step) {
    absl::StatusOr<ReferenceResult> expected = RunReference(*program, *cpu);
    ASSERT_TRUE(expected.ok()) << expected.status();
    KernelArgs args{};
    args.batch = m.batch;
    args.dim = m.dim;
    args.n_heads = m.n_heads;
    args.n_kv_heads = m.n_kv_heads;
    args.head_dim = m.head_dim;
    args.ffn = m.ffn_hidden;
    args.vocab = m.vocab;
    args.window = m.window;
    args.tokens = gpu->tokens.data_ptr<int64_t>();
    args.positions = gpu->positions.data_ptr<int64_t>();
    args.rope_cos = gpu->rope_cos.data_ptr();
    args.rope_sin = gpu->rope_sin.data_ptr();
    args.embedding = gpu->embedding.data_ptr();
    args.final_norm = gpu->final_norm.data_ptr();
    args.lm_head = gpu->lm_head.data_ptr();
    args.final_eps = static_cast<float>(gpu->final_eps);
    args.layers = static_cast<const KernelLayer*>(layers_device.data_ptr());
    args.hidden = hidden.data_ptr<float>();
    args.qkv = qkv.data_ptr<float>();
    args.attention = attention.data_ptr<float>();
    args.activation = activation.data_ptr<float>();
    args.logits = logits.data_ptr<float>();
    args.next_token = next_token.data_ptr<int64_t>();
    args.instructions = static_cast<const DeviceInstruction*>(instructions.data_ptr());
    args.queue_begin = static_cast<const int32_t*>(queue_begin.data_ptr());
    args.queue = static_cast<const int32_t*>(queue.data_ptr());
    args.counters = reinterpret_cast<uint32_t*>(counters.data_ptr<int32_t>());
    args.step = step;
    ASSERT_EQ(LaunchDecodeStep(args, sms, at::cuda::getCurrentCUDAStream().stream()), cudaSuccess) << "step " << step;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "step " << step;

    // bf16 weights and caches; the kernel sums in fp32 where the reference rounds to bf16 after
    // each op: within 2% of the largest logit, and a different next token only at a near-tie.
    const at::Tensor got = logits.cpu().reshape({m.batch, 1, m.vocab});
    const at::Tensor want = expected->logits.to(at::kFloat);
    const double scale = want.abs().max().item<double>();
    EXPECT_LE((got - want).abs().max().item<double>(), 2e-2 * scale) << "step " << step;
    const at::Tensor tokens = next_token.cpu();
    for (int64_t b = 0; b < m.batch; ++b) {
      const int64_t mine = tokens[b].item<int64_t>(), theirs = expected->next_token[b].item<int64_t>();
      if (mine != theirs) {
        EXPECT_LE(std::abs(want[b][0][mine].item<double>() - want[b][0][theirs].item<double>()), 2e-2 * scale)
            << "step " << step << ", sequence " << b << ": token " << mine << " against " << theirs;
      }
    }
    for (size_t l = 0; l < gpu->layers.size(); ++l) {
      for (const auto& [mine, theirs] : {std::make_pair(gpu->layers[l].key_cache, cpu->layers[l].key_cache),
                                         std::make_pair(gpu->layers[l].value_cache, cpu->layers[l].value_cache)}) {
        const at::Tensor diff = (mine.cpu().to(at::kFloat) - theirs.to(at::kFloat)).abs().max();
        EXPECT_LE(diff.item<double>(), 2e-2 * theirs.to(at::kFloat).abs().max().item<double>()) << "layer " << l;
      }
    }
    // The next step: the reference's tokens (both sides), one position further.
    cpu->tokens.copy_(expected->next_token.reshape_as(cpu->tokens));
    gpu->tokens.copy_(cpu->tokens);
    cpu->positions.add_(1);
    gpu->positions.add_(1);
  }
}

}  // namespace
}  // namespace magi::megakernel
