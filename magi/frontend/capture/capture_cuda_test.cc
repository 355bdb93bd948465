// Capture and interpreter on CUDA (needs a GPU; tagged "gpu"): the captured training
// step of a tiny Llama matches eager LibTorch on the same GPU, in fp32 and in bf16.
#include <torch/torch.h>

#include <map>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/frontend/capture/capture.h"
#include "magi/models/llama.h"
#include "magi/backend/torch_executable.h"

namespace magi {
namespace {

void CompareOnCuda(torch::Dtype dtype, double atol, double rtol) {
  ASSERT_TRUE(torch::cuda::is_available());
  torch::manual_seed(11);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  models::Llama model(models::LlamaConfig::Tiny(), options);
  at::Tensor tokens = torch::randint(0, 256, {4, 32}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  at::Tensor targets = torch::randint(0, 256, {4, 32}, tokens.options());
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, targets});
  ASSERT_TRUE(captured.ok()) << captured.status();

  std::map<std::string, at::Tensor> eager;
  at::Tensor loss = loss_fn({tokens, targets});
  loss.backward();
  eager["loss"] = loss.detach();
  for (const auto& item : model->named_parameters()) eager[item.key() + ".grad"] = item.value().grad().clone();

  auto exe = CompileForTorch("interpreter", *captured->module, captured->graph_name);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto inputs = BindInputs(*captured, *model, {tokens, targets});
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  auto outputs = (*exe)->Run(*inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const auto& names = captured->graph()->outputs();
  ASSERT_EQ(names.size(), eager.size());
  for (size_t i = 0; i < names.size(); ++i) {
    at::Tensor expected = eager.at(names[i].name).to(torch::kFloat);
    at::Tensor actual = (*outputs)[i].to(torch::kFloat);
    EXPECT_TRUE(actual.is_cuda());
    EXPECT_TRUE(torch::allclose(actual, expected, rtol, atol))
        << names[i].name << ": max abs diff " << (actual - expected).abs().max().item<double>();
  }
  std::printf("%s: %lld ops captured, peak %lld bytes held by the interpreter\n", c10::toString(dtype),
              static_cast<long long>(captured->recorded_ops),
              static_cast<long long>((*exe)->last_run_stats().peak_live_bytes));
}

// CUDA's embedding backward accumulates with atomics, so fp32 is compared within 1e-5, not bitwise.
TEST(CaptureCudaTest, Fp32TrainingStepMatchesEager) { CompareOnCuda(torch::kFloat, 1e-5, 1e-4); }

TEST(CaptureCudaTest, Bf16TrainingStepMatchesEager) { CompareOnCuda(torch::kBFloat16, 1e-2, 2e-2); }

}  // namespace
}  // namespace magi
