// Trains the Llama-style model with FSDP on the Shakespeare sonnets, on local processes.
//
//   tools/bazel run //examples:train                       # 2 CPU processes, small model
//   tools/bazel run //examples:train -- --world_size=4 --steps=100 --model=tiny
//
// With no RANK in the environment and --world_size > 1 it launches --world_size copies
// of itself (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, as torchrun does); under
// torchrun or Slurm it is one of the workers. Each step is ONE captured graph holding the
// all-gathers, forward, loss, backward, reduce-scatters and AdamW of this rank (see
// magi/frontend/fsdp). Rank 0 shows a progress line and writes, under --out_dir,
// loss.csv, loss.svg, summary.json (also --summary_json) and, with every rank, a
// sharded checkpoint: checkpoint/step-<N>/ with one file per rank and a manifest that
// commits the step once every rank's file is on disk (--checkpoint_every, --keep_checkpoints).
// --resume continues from the newest committed step, at any --world_size (resharded).
// The summary also has rank 0's GPU energy over the timed steps (gpu_joules_per_step,
// gpu_window_seconds, gpu_average_watts, gpu_power_limit_watts; NVML on CUDA, else -1).
//
// --deterministic (docs/deterministic.md): bitwise-identical losses and parameters run
// after run on the same hardware kind and world size. The process settings are applied
// first (magi/runtime/deterministic), the step is compiled in deterministic mode, and
// rank 0 prints the settings and the plan hash every rank agreed on:
//   tools/bazel run //examples:train -- --deterministic --steps=20 --dump_dir=/tmp/run1
//   tools/bazel run //examples:train -- --deterministic --steps=20 --dump_dir=/tmp/run2
//   tools/bazel run //magi/tools:magi -- compare /tmp/run1/losses /tmp/run2/losses   # "identical: ..."
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "examples/eager_reference.h"
#include "examples/flags_usage.h"
#include "examples/token_batches.h"
#include "examples/train_checkpoints.h"
#include "examples/train_dump.h"
#include "examples/train_flags.h"
#include "examples/train_loop.h"
#include "examples/train_mesh.h"
#include "examples/train_report.h"
#include "magi/base/file.h"
#include "magi/comm/communicator.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/ir/printer.h"
#include "magi/models/llama.h"
#include "magi/runtime/deterministic/deterministic.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"

namespace {

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "\n[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}
#define MAGI_OR_FAIL(expr) \
  if (absl::Status status_ = (expr); !status_.ok()) return Fail(rank, status_.message())

int Train(const magi::examples::TrainFlags& flags, const magi::DistributedEnv& env, const char* argv0) {
  const int rank = env.rank;
  // Ranks on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    torch::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, env.world_size)));
  }
  const magi::CompileOptions& compile = flags.compile;
  if (compile.deterministic) {
    // Before anything touches CUDA, cuBLAS or NCCL (they read these settings when they start).
    absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();
    if (!settings.ok()) return Fail(rank, settings.status().message());
    if (rank == 0) std::fprintf(stderr, "magi: deterministic mode: %s\n", settings->c_str());
  }
  // Made before training so that an unwritable --out_dir fails now, not after the last step.
  const std::string& out_dir = flags.out_dir;
  std::error_code dir_error;
  if (rank == 0 && (std::filesystem::create_directories(out_dir, dir_error), dir_error)) {
    return Fail(rank, absl::StrCat("cannot create --out_dir ", out_dir, ": ", dir_error.message()));
  }
  const torch::Device device =
      flags.device == "cuda" ? torch::Device(torch::kCUDA, env.local_rank) : torch::Device(torch::kCPU);
  const int seq = flags.seq_len, local = flags.batch_size, steps = flags.steps;
  const magi::models::LlamaConfig& config = flags.model_config;
  magi::CheckpointOptions checkpoint_options;  // what a resumed run must share with the saving one
  checkpoint_options.keep_last = flags.keep_checkpoints;
  checkpoint_options.config = flags.checkpoint_config;
  checkpoint_options.global_batch = static_cast<int64_t>(env.world_size) * local;
  magi::examples::TrainCheckpoints checkpoints(out_dir + "/checkpoint", checkpoint_options);
  if (flags.checkpoint && !flags.resume) MAGI_OR_FAIL(checkpoints.RefuseEarlierRun());

  // The training text (tiny, small): byte windows of it are the batches.
  at::Tensor corpus;
  if (!flags.random_tokens) {
    absl::StatusOr<at::Tensor> text = magi::examples::ReadTextCorpus(magi::examples::DataPath(flags.data, argv0), seq);
    if (!text.ok()) return Fail(rank, text.status().message());
    corpus = *std::move(text);
  }
  absl::StatusOr<magi::examples::TrainMesh> mesh = magi::examples::CreateTrainMesh(env, flags.mesh);
  if (!mesh.ok()) return Fail(rank, mesh.status().message());

  torch::manual_seed(flags.seed);
  const torch::Dtype dtype = flags.bf16 ? torch::kBFloat16 : torch::kFloat;
  magi::models::Llama model(config,
                            torch::TensorOptions().device(flags.meta_init ? torch::kMeta : device).dtype(dtype));
  for (auto& layer : model->layers) magi::FullyShard(*layer, mesh->mesh, flags.shard);
  magi::FullyShard(*model, mesh->mesh, flags.shard);
  // Batch of step s: global random windows of the text, or random tokens (--model=1b), the
  // same on every rank (token_batches.h: a stream indexed by step); rows [first, first + count).
  const magi::examples::TokenBatches stream =
      flags.random_tokens ? magi::examples::TokenBatches::RandomTokens(config.vocab_size, seq, flags.seed, device)
                          : magi::examples::TokenBatches::TextWindows(corpus.to(device), seq, flags.seed);
  const int64_t global_batch = checkpoint_options.global_batch;
  auto global = [&](int step) { return stream.Rows(step, global_batch, 0, global_batch); };
  auto batch = [&](int step) { return stream.Rows(step, global_batch, rank * local, local); };
  // The loss in fp32 (bf16 logits are cast first, as PyTorch mixed-precision recipes do).
  magi::LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return magi::models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
  };
  if (rank == 0 && !flags.dump_dir.empty()) {
    magi::examples::NamedTensors weights;
    for (const auto& item : model->named_parameters()) weights.emplace_back(item.key(), item.value().to(torch::kFloat));
    MAGI_OR_FAIL(magi::examples::WriteInitialDump(flags.dump_dir, weights, steps, global));
    std::fprintf(stderr, "magi: wrote the initial weights and %d batches to %s\n", steps, flags.dump_dir.c_str());
  }
  auto compile_start = std::chrono::steady_clock::now();
  if (rank == 0 && compile.optimization.memory_budget_bytes > 0) {
    std::fprintf(stderr, "magi: searching a strategy for %.3f GB per rank...\n",
                 compile.optimization.memory_budget_bytes / 1e9);
  }
  magi::CaptureOptions capture_options;
  if (flags.meta_init)
    capture_options.device = device.is_cuda() ? magi::Device{magi::DeviceType::kCuda, device.index()}
                                              : magi::Device{magi::DeviceType::kCpu, -1};
  std::vector<at::Tensor> example = batch(0);  // one micro-batch
  for (at::Tensor& tensor : example) tensor = tensor.narrow(0, 0, local / flags.training.grad_accum).contiguous();
  auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example, mesh->communicators, flags.adamw, capture_options,
                                           compile, flags.training);
  if (!trainer.ok()) return Fail(rank, trainer.status().message());
  (*trainer)->ReleaseModuleParameters();  // the trainer holds this rank's shards; the replica only costs memory
  if (rank == 0) std::fprintf(stderr, "%s", (*trainer)->strategy_report().c_str());
  if (rank == 0 && !flags.dump_graph.empty()) {
    MAGI_OR_FAIL(magi::WriteFileAtomically(flags.dump_graph, magi::PrintModule((*trainer)->module())));
  }
  double compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  if (rank == 0) {
    magi::examples::CompiledStep compiled = magi::examples::CompiledStepOf(**trainer);
    compiled.model = config.ToString();
    compiled.parameters = config.NumParameters();
    compiled.world_size = env.world_size;
    compiled.compile_seconds = compile_seconds;
    compiled.device_profile = compile.cost_model.device_profile;
    compiled.calibration = flags.training.calibration;
    compiled.deterministic = compile.deterministic;
    std::fprintf(stderr, "%s", magi::examples::CompileReport(compiled).c_str());
  }

  std::unique_ptr<magi::examples::EagerReference> reference;
  if (flags.check_eager) {
    reference = magi::examples::EagerReference::Create(
        config, flags.seed, flags.meta_init ? torch::Device(torch::kCPU) : device, dtype, device, flags.adamw);
  }
  int first_step = 0;
  if (flags.resume) {
    absl::StatusOr<int> resumed = checkpoints.Resume(**trainer, rank, mesh->shards, env.world_size, local, steps);
    if (!resumed.ok()) return Fail(rank, resumed.status().message());
    first_step = *resumed;
  }
  magi::examples::TrainLoopOptions loop_options;
  loop_options.rank = rank;
  loop_options.device = device;
  loop_options.first_step = first_step;
  loop_options.steps = steps;
  loop_options.untimed_steps = flags.untimed_steps;
  loop_options.tokens_per_step = global_batch * seq;
  loop_options.checkpoint_every = flags.checkpoint ? flags.checkpoint_every : 0;
  loop_options.trace = flags.trace;
  loop_options.kernel_trace = flags.kernel_trace;
  loop_options.calibrate = rank == 0 && !flags.calibration_out.empty();
  loop_options.clip_grad_norm = flags.training.clip_grad_norm;
  (*trainer)->set_profile_nodes(loop_options.calibrate);
  magi::examples::TrainLoop loop(loop_options);
  MAGI_OR_FAIL(
      loop.Run(**trainer, *mesh->all, batch, global, reference.get(), [&] { return checkpoints.Save(**trainer); }));
  if (!flags.dump_dir.empty()) {  // the losses and final parameters, for `magi compare` (a collective)
    absl::StatusOr<magi::examples::NamedTensors> final_weights = (*trainer)->GatherFullParameters();
    if (!final_weights.ok()) return Fail(rank, final_weights.status().message());
    if (rank == 0) MAGI_OR_FAIL(magi::examples::WriteFinalDump(flags.dump_dir, loop.losses(), *final_weights));
  }
  // The last step, committed: every rank's shards, moments and state, then the manifest.
  if (flags.checkpoint) MAGI_OR_FAIL(checkpoints.Save(**trainer));
  if (rank != 0) return 0;
  if (std::filesystem::create_directories(out_dir, dir_error), dir_error) {  // none yet with --checkpoint=false
    return Fail(rank, absl::StrCat("cannot create ", out_dir, ": ", dir_error.message()));
  }
  magi::examples::Summary summary = loop.SummaryOf(**trainer);
  summary.world_size = env.world_size;
  summary.memory_budget_bytes = compile.optimization.memory_budget_bytes;
  summary.backend = compile.backend;
  summary.model = flags.model;
  summary.dtype = flags.dtype;
  summary.compile_seconds = compile_seconds;
  summary.deterministic = compile.deterministic;
  summary.calibration = flags.training.calibration;
  summary.global_batch = global_batch;
  summary.resumed_from_step = flags.resume ? first_step : -1;
  summary.resumed_world_size = checkpoints.resumed_world_size();
  summary.resumed_global_batch = checkpoints.resumed_global_batch();
  const std::string json = magi::examples::SummaryJson(summary);
  for (const auto& [path, contents] :
       std::vector<std::pair<std::string, std::string>>{{out_dir + "/loss.csv", magi::examples::LossCsv(loop.curve())},
                                                        {out_dir + "/loss.svg", magi::examples::LossSvg(loop.curve())},
                                                        {out_dir + "/summary.json", json}}) {
    MAGI_OR_FAIL(magi::WriteFileAtomically(path, contents));
  }
  if (!flags.summary_json.empty()) MAGI_OR_FAIL(magi::WriteFileAtomically(flags.summary_json, json));
  std::fprintf(stderr, "%s",
               magi::examples::FinalReport(summary, loop.seconds(), out_dir, loop.energy().measured()).c_str());
  if (std::string note = (*trainer)->FinishStepCalibration(); !note.empty()) {
    std::fprintf(stderr, "magi: %s\n", note.c_str());
  }
  std::fprintf(stderr, "%s", magi::examples::StepGraphReport(summary).c_str());
  if (loop_options.calibrate) {
    MAGI_OR_FAIL(loop.calibration().Save(flags.calibration_out));
    std::fprintf(stderr, "wrote %zu measured op times to %s\n", loop.calibration().size(),
                 flags.calibration_out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = magi::ParseExampleFlags(
      argc, argv,
      "Trains the Llama-style model with FSDP on the Shakespeare sonnets, on local processes (or as a worker of "
      "torchrun / srun).\n  tools/bazel run //examples:train -- [--world_size=2] [--steps=N] [--model=tiny|small|1b] "
      "...",
      "examples/train_flags.cc");
  // Every flag is checked once, before any process starts.
  absl::StatusOr<magi::examples::TrainFlags> flags = magi::examples::TrainFlagsFromCommandLine();
  if (!flags.ok()) return Fail(0, flags.status().message());
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(flags->world_size, argc, argv)) return *code;
  return Train(*flags, *env, argv[0]);
}
