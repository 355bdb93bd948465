// What is alive at the memory peak of an FSDP training step, by value, without a GPU: the
// step is captured on meta, sharded and compiled (no backend run), and the memory planner's
// peak node is shown with the largest live storages (their producer op and module path).
//
//   tools/bazel run //magi/benchmarks:step_memory_report -- --model=1b --batch_size=4 --seq_len=2048
//   tools/bazel run //magi/benchmarks:step_memory_report -- --model=1b --passes="..." --top=30
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/models/llama.h"
#include "magi/analysis/liveness.h"
#include "magi/analysis/memory_plan.h"

ABSL_FLAG(std::string, model, "1b", "tiny, small or 1b");
ABSL_FLAG(int, batch_size, 4, "Sequences per rank");
ABSL_FLAG(int, seq_len, 2048, "Tokens per sequence");
ABSL_FLAG(int, world_size, 1, "Ranks the step is sharded for");
ABSL_FLAG(std::string, passes, "", "Pass pipeline to run after sharding");
ABSL_FLAG(int, top, 25, "How many live storages to list");
ABSL_FLAG(std::string, model_shape, "",
          "8b: Llama 3 8B shapes (search_benchmark's step: one 2048-token sequence, --world_size=8); overrides --model");
ABSL_FLAG(bool, donate, true,
          "Donate the optimizer state (the new shards and moments alias the old, AdamW runs in place); false: the "
          "functional step before donation");
ABSL_FLAG(std::string, reshard_after_forward, "true",
          "Every group's reshard_after_forward: true, false or K (reshard to K ranks after forward)");
ABSL_FLAG(bool, cpu_offload, false,
          "FSDP2's CPUOffloadPolicy: master shards, moments and AdamW on the host; the device's peak is reported "
          "apart from the host's");
ABSL_FLAG(bool, caller_holds_inputs, false,
          "Plan as if the caller kept every input it did not donate until the step ends (what the trainer did "
          "before donation: its state stayed referenced while the step ran)");

namespace magi {
namespace {

int Report() {
  models::LlamaConfig config = absl::GetFlag(FLAGS_model) == "1b"      ? models::LlamaConfig::Llama1B()
                               : absl::GetFlag(FLAGS_model) == "small" ? models::LlamaConfig::Small()
                                                                       : models::LlamaConfig::Tiny();
  if (absl::GetFlag(FLAGS_model_shape) == "8b") config = models::LlamaConfig::Llama3_8B();
  const int seq = absl::GetFlag(FLAGS_seq_len), batch = absl::GetFlag(FLAGS_batch_size);
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  auto options = torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16);
  models::Llama model(config, options);
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create({absl::GetFlag(FLAGS_world_size)}, {"dp"}, 0);
  if (!mesh.ok()) return std::fprintf(stderr, "%s\n", std::string(mesh.status().message()).c_str()), 1;
  FullyShardOptions shard_options;
  absl::StatusOr<ReshardAfterForwardOption> reshard =
      ReshardAfterForwardOption::Parse(absl::GetFlag(FLAGS_reshard_after_forward));
  if (!reshard.ok()) return std::fprintf(stderr, "--%s\n", std::string(reshard.status().message()).c_str()), 1;
  shard_options.reshard_after_forward = *reshard;
  shard_options.cpu_offload = absl::GetFlag(FLAGS_cpu_offload);
  shard_options.mixed_precision.param_dtype = DType::kBFloat16;
  shard_options.mixed_precision.reduce_dtype = DType::kFloat32;
  for (auto& layer : model->layers) FullyShard(*layer, *mesh, shard_options);
  FullyShard(*model, *mesh, shard_options);
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  CaptureOptions capture_options;
  capture_options.device = Device{DeviceType::kCuda, 0};
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(
      *model,
      [&](const std::vector<at::Tensor>& in) {
        return models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
      },
      {torch::empty({batch, seq}, meta_long), torch::empty({batch, seq}, meta_long)}, capture_options);
  if (!captured.ok()) return std::fprintf(stderr, "%s\n", std::string(captured.status().message()).c_str()), 1;
  absl::StatusOr<FsdpPlan> plan = PlanFromFullyShard(*model);
  if (!plan.ok()) return std::fprintf(stderr, "%s\n", std::string(plan.status().message()).c_str()), 1;
  plan->donate_state = absl::GetFlag(FLAGS_donate);
  CompileOptions compile;
  compile.sharding = *plan;
  compile.optimization.passes = absl::GetFlag(FLAGS_passes);
  compile.cost_model.device_profile = "h200";
  absl::StatusOr<CostModelBundle> cost = MakeCostModel(compile.cost_model);
  if (!cost.ok()) return std::fprintf(stderr, "%s\n", std::string(cost.status().message()).c_str()), 1;
  absl::StatusOr<OptimizedStep> step =
      OptimizeStep(std::move(captured->module), captured->graph_name, compile, *cost->model);
  if (!step.ok()) return std::fprintf(stderr, "%s\n", std::string(step.status().message()).c_str()), 1;
  const Graph& graph = step->graph();
  LivenessOptions liveness_options;
  liveness_options.inputs_held_by_caller = absl::GetFlag(FLAGS_caller_holds_inputs);
  absl::StatusOr<MemoryPlan> memory = PlanMemory(graph, /*assign_buffers=*/false, liveness_options);
  if (!memory.ok()) return std::fprintf(stderr, "%s\n", std::string(memory.status().message()).c_str()), 1;

  absl::StatusOr<Liveness> liveness = ComputeLiveness(graph, liveness_options);
  if (!liveness.ok()) return std::fprintf(stderr, "%s\n", std::string(liveness.status().message()).c_str()), 1;
  const int end = liveness->num_nodes;
  std::vector<Node*> nodes = graph.nodes();
  // The device's peak: its own storages, largest first.
  const std::vector<StorageLifetime> live = StoragesLiveAt(*liveness, memory->peak_node);
  int64_t by_role[5] = {0, 0, 0, 0, 0};
  for (const StorageLifetime& storage : live) {
    if (storage.value->is_graph_input()) by_role[static_cast<int>(storage.value->role())] += storage.bytes;
  }
  int64_t host_state = 0;  // host-resident inputs (CPU offload's state)
  for (const StorageLifetime& storage : liveness->storages) {
    if (storage.host && storage.value->is_graph_input()) host_state += storage.bytes;
  }
  int64_t total = 0;
  for (const StorageLifetime& l : live) total += l.bytes;
  const Node* peak = memory->peak_node >= 0 ? nodes[memory->peak_node] : nullptr;
  std::printf("%s: %d nodes; peak %.3f GB after node %d (%s, module %s); %zu storages live there, %.3f GB\n",
              config.ToString().c_str(), end, memory->peak_bytes / 1e9, memory->peak_node,
              peak != nullptr ? peak->op().c_str() : "-", peak != nullptr ? peak->annotations().module_path.c_str() : "-",
              live.size(), total / 1e9);
  // The optimizer phase's own peak (the state is updated there).
  int64_t optimizer_peak = 0;
  for (int i = 0; i < end; ++i) {
    if (nodes[i]->annotations().phase != Phase::kOptimizer) continue;
    int64_t before = i > 0 ? memory->live_after[i - 1] : 0;
    int64_t allocated = 0;
    for (const Value* result : nodes[i]->results()) {
      auto it = liveness->storage_of.find(result);
      if (it != liveness->storage_of.end() && liveness->storages[it->second].value == result &&
          !liveness->storages[it->second].host) {
        allocated += liveness->storages[it->second].bytes;
      }
    }
    optimizer_peak = std::max(optimizer_peak, before + allocated);
  }
  std::printf("donation %s%s: %zu results written in place; optimizer phase peak %.3f GB; live at the end %.3f GB\n",
              absl::GetFlag(FLAGS_donate) ? "on" : "off",
              liveness_options.inputs_held_by_caller ? ", undonated inputs held by the caller" : "",
              liveness->in_place.size(), optimizer_peak / 1e9,
              end > 0 ? memory->live_after[end - 1] / 1e9 : 0.0);
  std::printf("reshard_after_forward=%s, cpu_offload %s: device peak %.3f GB; host peak %.3f GB (state on the host "
              "%.3f GB)\n",
              reshard->ToString().c_str(), absl::GetFlag(FLAGS_cpu_offload) ? "on" : "off", memory->peak_bytes / 1e9,
              memory->host_peak_bytes / 1e9, host_state / 1e9);
  std::printf("inputs live (device): params %.3f GB, optimizer state %.3f GB, data %.3f GB, buffers %.3f GB\n",
              by_role[static_cast<int>(InputRole::kParam)] / 1e9, by_role[static_cast<int>(InputRole::kOptState)] / 1e9,
              by_role[static_cast<int>(InputRole::kData)] / 1e9, by_role[static_cast<int>(InputRole::kBuffer)] / 1e9);
  // Non-input storages grouped by producer op, then the largest ones.
  absl::flat_hash_map<std::string, std::pair<int64_t, int>> by_op;
  for (const StorageLifetime& l : live) {
    if (l.value->is_graph_input()) continue;
    auto& entry = by_op[l.value->producer()->op()];
    entry.first += l.bytes;
    ++entry.second;
  }
  std::vector<std::pair<std::string, std::pair<int64_t, int>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("\nlive intermediates by producer op:\n");
  for (const auto& [op, entry] : ops) std::printf("  %10.3f GB  %5d  %s\n", entry.first / 1e9, entry.second, op.c_str());
  std::printf("\nlargest live storages:\n");
  for (int i = 0; i < std::min<int>(absl::GetFlag(FLAGS_top), live.size()); ++i) {
    const Value* v = live[i].value;
    std::printf("  %9.3f GB  %%%s  %s  %s  [%d..%d]\n", live[i].bytes / 1e9, v->name().c_str(),
                v->type().ToString().c_str(),
                v->is_graph_input() ? "(input)"
                                    : absl::StrFormat("%s @%s", v->producer()->op(),
                                                      v->producer()->annotations().module_path)
                                          .c_str(),
                live[i].born, live[i].dies);
  }
  return 0;
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return magi::Report();
}
