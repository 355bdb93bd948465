// Generation (magi/generation) on one GPU: the tiny Llama's greedy KV-cache generation
// compiled for nccl_stream in stream mode, inside CUDA graphs, and with inductor
// partitions, against the interpreter on the same device and weights.
//
// Tolerance: the backends run the same ATen kernels except where inductor fuses (fp32
// Triton kernels), so logits agree within 1e-3 (fp32; what the CPU tests state for fused
// against unfused graphs is 1e-5, the GPU's fused reductions sum in another order). A
// greedy text may leave the reference's only where the reference's two best bytes were
// within that tolerance of each other; anywhere else a different byte is a wrong result.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/generation/text_generator.h"
#include "magi/models/llama.h"
#include "magi/runtime/nccl/nccl_communicator.h"

namespace magi {
namespace {

constexpr double kLogitTolerance = 1e-3;
constexpr int kLength = 24;

const std::vector<std::string>& Prompts() {
  // 1 byte, 5 bytes, and 40 > the window's half (a context overflow re-prefills it).
  static const std::vector<std::string> prompts = {"S", "Shall", "When forty winters shall besiege thy brow"};
  return prompts;
}

std::shared_ptr<Communicator> OneRankNccl() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  absl::StatusOr<std::shared_ptr<Communicator>> communicator =
      CreateNcclCommunicator(store, 0, 1, "dp", 0, std::chrono::seconds(60));
  EXPECT_TRUE(communicator.ok()) << communicator.status();
  return communicator.ok() ? *communicator : nullptr;
}

models::Llama TinyModelOnGpu() {
  torch::manual_seed(11);
  models::Llama model(models::LlamaConfig::Tiny(), torch::TensorOptions().device(torch::kCUDA));
  DeviceMesh mesh = *DeviceMesh::Create({1}, {"dp"}, 0);
  for (auto& layer : model->layers) FullyShard(*layer, mesh);
  FullyShard(*model, mesh);
  model->eval();
  return model;
}

struct GenerationRun {
  Generated generated;
  GenerationStats stats;
  std::string log;  // what compiling and generating wrote to stderr
};

GenerationRun Generate(models::LlamaImpl& model, std::shared_ptr<Communicator> communicator, const std::string& backend,
             const std::vector<std::string>& partition_backends, int batch) {
  GenerationOptions options;
  options.window = 32;
  options.batch = batch;
  options.inference.compile.backend = backend;
  options.inference.compile.partitioning.backends = partition_backends;
  GenerationRun run;
  testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<TextGenerator>> generator = TextGenerator::Create(model, communicator, options);
  absl::StatusOr<Generated> generated = generator.ok() ? (*generator)->Generate(Prompts(), kLength)
                                                       : absl::StatusOr<Generated>(generator.status());
  run.log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(generated.ok()) << backend << ": " << generated.status() << "\n" << run.log;
  if (!generated.ok()) return run;
  run.generated = *std::move(generated);
  run.stats = (*generator)->stats();
  return run;
}

// `got` against `want` prompt by prompt: logits within kLogitTolerance up to where the
// texts part, and they may part only at a byte whose two best logits were that close.
void ExpectSameGeneration(const Generated& want, const Generated& got, const std::string& what) {
  ASSERT_EQ(got.texts.size(), want.texts.size()) << what;
  for (size_t p = 0; p < want.texts.size(); ++p) {
    const size_t prompt = Prompts()[p].size();
    int same = 0;
    while (same < kLength && got.texts[p][prompt + same] == want.texts[p][prompt + same]) ++same;
    const int compared = std::min(kLength, same + 1);  // the byte where they part was drawn from comparable logits
    const double diff =
        (got.logits[p].narrow(0, 0, compared) - want.logits[p].narrow(0, 0, compared)).abs().max().item<double>();
    EXPECT_LE(diff, kLogitTolerance) << what << ", prompt " << p << ": logits over the first " << compared << " bytes";
    if (same < kLength) {
      at::Tensor top = std::get<0>(want.logits[p][same].topk(2));
      const double margin = (top[0] - top[1]).item<double>();
      EXPECT_LE(margin, 2 * kLogitTolerance) << what << ", prompt " << p << ": the text parts at byte " << same
                                             << " where the reference's best byte led by " << margin;
    }
  }
}

class GenerationGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const char* tmp = std::getenv("TEST_TMPDIR");
    setenv("MAGI_INDUCTOR_CACHE", (std::string(tmp != nullptr ? tmp : "/tmp") + "/inductor_cache").c_str(), 1);
  }
};

TEST_F(GenerationGpuTest, CompiledBackendsGenerateWhatTheInterpreterDoes) {
  std::shared_ptr<Communicator> communicator = OneRankNccl();
  ASSERT_NE(communicator, nullptr);
  models::Llama model = TinyModelOnGpu();
  for (int batch : {1, 2}) {
    GenerationRun reference = Generate(*model, communicator, "interpreter", {}, batch);
    ASSERT_EQ(reference.generated.texts.size(), Prompts().size());
    // The long prompt overflows the window: a re-prefill ran (the bucket path with a live cache).
    EXPECT_GT(reference.stats.reprefills, 0);
    for (const auto& [backend, partitions] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"nccl_stream", {}},
             {"nccl_stream{cuda_graph=true}", {}},
             {"nccl_stream{cuda_graph=true}", {"inductor"}},
         }) {
      const std::string what = absl::StrCat(backend, partitions.empty() ? "" : " + inductor", ", batch ", batch);
      GenerationRun run = Generate(*model, communicator, backend, partitions, batch);
      ExpectSameGeneration(reference.generated, run.generated, what);
      EXPECT_EQ(run.stats.reprefills, reference.stats.reprefills) << what;
      // What falls back says so (a graph that stays in stream mode, a partition left to
      // the primary backend): that is a failure here.
      for (const char* fallback : {"stays in stream mode", "staying in stream mode", "AOTInductor is unavailable",
                                   "failed to compile"}) {
        EXPECT_EQ(run.log.find(fallback), std::string::npos) << what << ":\n" << run.log;
      }
    }
  }
}

}  // namespace
}  // namespace magi
