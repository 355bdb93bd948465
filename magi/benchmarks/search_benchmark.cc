// Pass pipeline, simulation, AutoRecompute and strategy search on a real 8B-shaped step.
//
//   bazel run --config=opt //magi/benchmarks:search_benchmark
//
// The step graph is captured (not synthesized): Llama 3 8B shapes (32 layers, dim 4096,
// ffn 14336, vocab 128256), bf16 parameters with fp32 masters and reductions, one
// 2048-token sequence per rank, captured on meta and sharded for 8 ranks (33 FSDP groups);
// that is what Magi optimizes for a run on one 8 x H200 node. Building it links LibTorch;
// everything measured here is the LibTorch-free compiler.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdio>

#include "magi/base/check.h"
#include "magi/cost/simulator.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/verifier.h"
#include "magi/models/llama.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/pipeline.h"
#include "magi/search/strategy_search.h"

namespace magi {
namespace {

constexpr int64_t kWorld = 8;
constexpr char kPipeline[] =
    "reshard-after-forward{mode=reshard},bucket-collectives{max_mb=256},schedule-overlap{prefetch=2}";

// The sharded 8B step, built once.
const Module& Step8B() {
  static Module* module = [] {
    models::LlamaConfig config = models::LlamaConfig::Llama3_8B();
    config.max_seq_len = 2048;
    auto options = torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16);
    models::Llama model(config, options);
    auto mesh = DeviceMesh::Create({kWorld}, {"dp"}, 0);
    FullyShardOptions shard_options;
    shard_options.mixed_precision.param_dtype = DType::kBFloat16;
    shard_options.mixed_precision.reduce_dtype = DType::kFloat32;
    for (auto& layer : model->layers) FullyShard(*layer, *mesh, shard_options);
    FullyShard(*model, *mesh, shard_options);
    auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
    CaptureOptions capture_options;
    capture_options.device = Device{DeviceType::kCuda, 0};
    auto captured = CaptureTrainingStep(
        *model,
        [&](const std::vector<at::Tensor>& in) {
          return models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
        },
        {torch::empty({1, 2048}, meta_long), torch::empty({1, 2048}, meta_long)}, capture_options);
    MAGI_CHECK(captured.ok()) << captured.status();
    absl::StatusOr<FsdpPlan> plan = PlanFromFullyShard(*model);
    MAGI_CHECK(plan.ok()) << plan.status();
    MAGI_CHECK(ShardForFsdp(*captured->module, *captured->graph(), *plan).ok());
    MAGI_CHECK(VerifyModule(*captured->module).ok());
    return captured->module.release();
  }();
  return *module;
}

CostModel H200() { return CostModel(*LoadDeviceProfile("h200")); }

void Report(benchmark::State& state, const Graph& graph, const SimulationResult& result) {
  state.counters["nodes"] = graph.num_nodes();
  state.counters["step_ms"] = result.step_seconds * 1e3;
  state.counters["exposed_ms"] = result.exposed_communication_seconds * 1e3;
  state.counters["peak_GB"] = result.peak_bytes / 1e9;
}

void BM_CloneStep(benchmark::State& state) {
  const Module& step = Step8B();
  for (auto _ : state) benchmark::DoNotOptimize(CloneModule(step));
  state.counters["nodes"] = step.graphs()[0]->num_nodes();
}
BENCHMARK(BM_CloneStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Simulate(benchmark::State& state) {
  const Module& step = Step8B();
  CostModel model = H200();
  SimulationResult result;
  for (auto _ : state) result = *Simulate(*step.graphs()[0], model);
  Report(state, *step.graphs()[0], result);
}
BENCHMARK(BM_Simulate)->Unit(benchmark::kMillisecond)->UseRealTime();

// Clone + the pipeline (verifier after every pass), then a simulation of the result.
void BM_PassPipeline(benchmark::State& state) {
  const Module& step = Step8B();
  CostModel model = H200();
  SimulationResult result;
  int nodes = 0;
  for (auto _ : state) {
    std::unique_ptr<Module> copy = CloneModule(step);
    absl::StatusOr<bool> changed = RunPassPipeline(kPipeline, *copy);
    MAGI_CHECK(changed.ok()) << changed.status();
    result = *Simulate(*copy->graphs()[0], model);
    nodes = copy->graphs()[0]->num_nodes();
  }
  state.counters["nodes"] = nodes;
  state.counters["step_ms"] = result.step_seconds * 1e3;
  state.counters["exposed_ms"] = result.exposed_communication_seconds * 1e3;
  state.counters["peak_GB"] = result.peak_bytes / 1e9;
}
BENCHMARK(BM_PassPipeline)->Unit(benchmark::kMillisecond)->UseRealTime();

// AutoRecompute to a budget of (graph peak - arg x 100 MB) on the scheduled step.
void BM_AutoRecompute(benchmark::State& state) {
  std::unique_ptr<Module> scheduled = CloneModule(Step8B());
  MAGI_CHECK(RunPassPipeline(kPipeline, *scheduled).ok());
  int64_t peak = Simulate(*scheduled->graphs()[0], H200())->peak_bytes;
  int64_t budget = peak - static_cast<int64_t>(state.range(0)) * 100000000;
  RecomputeReport report;
  for (auto _ : state) {
    std::unique_ptr<Module> copy = CloneModule(*scheduled);
    AutoRecompute pass(budget, H200());
    absl::StatusOr<bool> changed = pass.Run(*copy);
    MAGI_CHECK(changed.ok()) << changed.status();
    report = pass.report();
  }
  state.counters["peak_before_GB"] = report.peak_before / 1e9;
  state.counters["peak_after_GB"] = report.peak_after / 1e9;
  state.counters["floor_GB"] = report.peak_floor / 1e9;
  state.counters["recomputed"] = report.recomputed;
  state.counters["recompute_ms"] = report.recompute_seconds * 1e3;
}
BENCHMARK(BM_AutoRecompute)->Arg(10)->Arg(25)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// The whole search (32 pipelines, recompute where needed) under a per-rank budget in MB.
void BM_StrategySearch(benchmark::State& state) {
  const Module& step = Step8B();
  const int64_t budget = state.range(0) * 1000000;  // MB
  StrategyPlan plan;
  for (auto _ : state) {
    absl::StatusOr<StrategyPlan> searched = SearchStrategy(step, step.graphs()[0]->name(), H200(), budget);
    MAGI_CHECK(searched.ok()) << searched.status();
    plan = *std::move(searched);
  }
  state.counters["candidates"] = plan.candidates.size();
  state.counters["step_ms"] = plan.chosen.prediction.step_seconds * 1e3;
  state.counters["exposed_ms"] = plan.chosen.prediction.exposed_communication_seconds * 1e3;
  state.counters["peak_GB"] = plan.chosen.prediction.peak_bytes / 1e9;
  state.counters["recomputed"] = plan.chosen.recomputed_nodes;
  std::fprintf(stderr, "\n%s\n", FormatStrategyPlan(plan).c_str());
}
BENCHMARK(BM_StrategySearch)
    ->Arg(80000)
    ->Arg(40000)
    ->Arg(39600)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace magi

BENCHMARK_MAIN();
