// Capture time and interpreter overhead.
//
//   bazel run --config=opt //magi/frontend/capture:capture_benchmark
//
// BM_CaptureLlamaOnMeta/L/D: whole-step capture (forward, loss, backward) of a Llama of
//   L layers and width D built on meta (nothing allocated); D=4096 uses the 8B shapes
//   (ffn 14336, vocab 128256, 32 heads), others scale ffn to ~2.7 D.
// BM_CaptureTinyLlamaOnCpu: the same on real CPU tensors (kernels run too).
// BM_Interpreter*/N: N dependent adds on a 1-element tensor, run by the interpreter
//   and eagerly; the difference per op is the interpreter's dispatch overhead.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "magi/backend/interpreter/interpreter.h"
#include "magi/frontend/capture/capture.h"
#include "magi/models/llama.h"
#include "magi/backend/torch_executable.h"

namespace magi {
namespace {

models::LlamaConfig ConfigFor(int64_t layers, int64_t width) {
  models::LlamaConfig c = width == 4096 ? models::LlamaConfig::Llama3_8B() : models::LlamaConfig::Tiny();
  c.n_layers = layers;
  c.max_seq_len = 2048;
  if (width != 4096) {
    c.dim = width;
    c.n_heads = std::max<int64_t>(1, width / 64);
    c.ffn_hidden = width * 8 / 3;
  }
  return c;
}

void BM_CaptureLlamaOnMeta(benchmark::State& state) {
  models::LlamaConfig config = ConfigFor(state.range(0), state.range(1));
  models::Llama model(config, torch::TensorOptions().device(torch::kMeta));
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  at::Tensor tokens = torch::empty({1, 2048}, meta_long);
  at::Tensor targets = torch::empty({1, 2048}, meta_long);
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  CaptureOptions options;
  options.device = Device{DeviceType::kCuda, 0};
  int64_t nodes = 0;
  for (auto _ : state) {
    absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, targets}, options);
    if (!captured.ok()) {
      state.SkipWithError(std::string(captured.status().message()).c_str());
      return;
    }
    nodes = captured->graph()->num_nodes();
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["params_B"] = static_cast<double>(config.NumParameters()) / 1e9;
  // Time per node = Time / nodes (see docs/capture.md).
}
BENCHMARK(BM_CaptureLlamaOnMeta)
    ->Args({2, 256})
    ->Args({8, 1024})
    ->Args({32, 4096})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_CaptureTinyLlamaOnCpu(benchmark::State& state) {
  torch::manual_seed(0);
  models::Llama model(models::LlamaConfig::Tiny());
  at::Tensor tokens = torch::randint(0, 256, {2, 32});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  for (auto _ : state) {
    auto captured = CaptureTrainingStep(*model, loss_fn, {tokens, tokens});
    benchmark::DoNotOptimize(captured);
  }
}
BENCHMARK(BM_CaptureTinyLlamaOnCpu)->Unit(benchmark::kMillisecond)->UseRealTime();

struct AddChain : torch::nn::Module {
  explicit AddChain(int n) : n(n) {}
  at::Tensor forward(at::Tensor x) {
    for (int i = 0; i < n; ++i) x = x + 1;
    return x;
  }
  int n;
};

void BM_InterpreterAddChain(benchmark::State& state) {
  auto model = std::make_shared<AddChain>(static_cast<int>(state.range(0)));
  at::Tensor x = torch::zeros({1});
  auto captured = CaptureForward(*model, [&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{model->forward(in[0])};
  }, {x});
  auto exe = CompileForTorch("interpreter", *captured->module, captured->graph_name);
  auto inputs = BindInputs(*captured, *model, {x});
  for (auto _ : state) {
    auto out = (*exe)->Run(*inputs);
    benchmark::DoNotOptimize(out);
  }
  state.counters["ops"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_InterpreterAddChain)->Arg(1000)->UseRealTime();

void BM_EagerAddChain(benchmark::State& state) {
  AddChain model(static_cast<int>(state.range(0)));
  torch::NoGradGuard no_grad;
  at::Tensor x = torch::zeros({1});
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(x));
  state.counters["ops"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_EagerAddChain)->Arg(1000)->UseRealTime();

}  // namespace
}  // namespace magi

BENCHMARK_MAIN();
