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
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/compile_flags.h"
#include "examples/eager_reference.h"
#include "examples/flags_usage.h"
#include "examples/token_batches.h"
#include "examples/train_checkpoints.h"
#include "examples/train_dump.h"
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

ABSL_FLAG(int, world_size, 2, "Number of processes (ranks) when launching locally");
ABSL_FLAG(std::string, model, "tiny",
          "Model size: tiny (2 layers x 64, the default), small (4 x 256), or 1b (953M: 16 layers x 2048, vocab "
          "32000, the GPU benchmark's shape; trained on seeded random tokens)");
ABSL_FLAG(std::string, dtype, "f32",
          "Compute dtype: f32, or bf16 (bf16 parameters gathered and computed, fp32 master shards, AdamW and "
          "gradient reduction: FSDP2's MixedPrecisionPolicy(bfloat16, float32))");
ABSL_FLAG(int, steps, 200, "Optimizer steps");
ABSL_FLAG(int, batch_size, 0, "Sequences per rank per step (0: 8, or 4 for --model=1b)");
ABSL_FLAG(int, seq_len, 0, "Tokens per sequence (0: 64, or 2048 for --model=1b)");
ABSL_FLAG(int, untimed_steps, 1, "Steps left out of the timing (compilation, allocator warm-up, CUDA graph capture)");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "Learning-rate schedule: constant, or cosine (to --min_lr at --steps); both after --warmup_steps of "
          "linear warm-up. The AdamW scalars are step inputs: nothing is recompiled");
ABSL_FLAG(int, warmup_steps, 0, "Learning-rate warm-up steps (linear from lr / warmup_steps to lr)");
ABSL_FLAG(double, min_lr, 0, "The learning rate --lr_schedule=cosine ends at");
ABSL_FLAG(int, grad_accum, 1,
          "Micro-batches per step: --batch_size sequences per rank are split into this many, their gradients "
          "accumulated unsharded and reduce-scattered once per step (FSDP2's set_requires_gradient_sync)");
ABSL_FLAG(double, clip_grad_norm, 0, "Clip the global gradient norm to this (torch.nn.utils.clip_grad_norm_; 0: off)");
ABSL_FLAG(std::string, mesh, "",
          "Device mesh: empty (1-D over all ranks), or RxS for HSDP: shard within groups of S ranks, all-reduce "
          "gradients across the R groups (R * S = world size), e.g. 2x2");
ABSL_FLAG(std::string, reshard_after_forward, "true",
          "FSDP2's reshard_after_forward for every group: true (gather again in backward), false (keep the gathered "
          "parameters until backward), or K (keep 1/K of them; backward gathers over K ranks, a divisor of the shard "
          "group other than 1 and its size, e.g. the ranks of one node)");
ABSL_FLAG(bool, cpu_offload, false,
          "FSDP2's CPUOffloadPolicy: master shards and AdamW moments on the host (pinned where CUDA is), AdamW "
          "run there; shards copied to the device for each gather, reduced gradients copied back");
ABSL_FLAG(std::string, init, "device",
          "device (build the model on --device, then shard it) or meta (build it on the meta device; each rank "
          "materializes only its shards, the same weights as --init=device for the same --seed)");
ABSL_FLAG(std::string, trace, "", "Write a Chrome/Perfetto timeline of the last step here (backends that can)");
ABSL_FLAG(std::string, kernel_trace, "",
          "Record the last step on rank 0 with Kineto (torch.profiler's recorder: every ATen op and, on CUDA, "
          "every kernel) and write the Chrome trace here (that step is left out of the timing); "
          "tools/kernel_breakdown.py sums it by kernel family");
ABSL_FLAG(std::string, dump_dir, "",
          "Write the initial full weights (weights.{json,bin}) and the global batches of every step "
          "(batches.{json,bin}) here as magi-tensors-v1 files, for PyTorch runs on the same init and data; after "
          "training also every step's mean loss (losses.{json,bin}, float64) and the final full parameters "
          "(final_weights.{json,bin}), which `magi compare` compares bitwise");
ABSL_FLAG(bool, split_master_weights, false,
          "Hold each fp32 master shard the step only casts to bf16 as its bf16 high half + low 16 bits "
          "(--dtype=bf16): the step computes with the high half, so its parameter casts go; the same training but "
          "for exact ties (docs/fsdp.md)");
ABSL_FLAG(double, lr, 3e-3, "AdamW learning rate");
ABSL_FLAG(std::string, device, "cpu", "cpu (Gloo collectives) or cuda (NCCL; needs a --config=cuda build)");
ABSL_FLAG(bool, check_eager, false,
          "Also train an eager LibTorch copy (torch::optim::AdamW, global batch) and report the loss difference");
ABSL_FLAG(std::string, communicator, "",
          "Collective library: gloo or nccl (default: gloo on cpu, nccl on cuda; nccl needs a --config=cuda build)");
ABSL_FLAG(std::string, data, "", "Training text (default: the bundled Shakespeare sonnets)");
ABSL_FLAG(std::string, out_dir, "/tmp/magi_train", "Where the loss curve, summary and checkpoint go");
ABSL_FLAG(std::string, summary_json, "", "Also write the summary JSON here");
ABSL_FLAG(int, seed, 0, "Seed of the initial weights and of the batches");
ABSL_FLAG(bool, checkpoint, true, "Write the sharded checkpoint at the end (benchmarks turn it off: 11 GB at 1b)");
ABSL_FLAG(int, checkpoint_every, 0, "Also commit a checkpoint every N steps (0: only at the end)");
ABSL_FLAG(int, keep_checkpoints, 2, "Committed checkpoint steps to keep, the newest (0: all)");
ABSL_FLAG(bool, resume, false,
          "Continue from the newest committed checkpoint step in --out_dir/checkpoint (same model, dtype, seq_len and "
          "seed; any world size: shards are rebuilt for this one)");
ABSL_FLAG(int, timeout_s, 120, "Collective timeout: a dead or hung rank fails the run after this");
ABSL_FLAG(std::string, calibration_out, "", "Write the op times measured on rank 0 here (CSV) for later runs");
ABSL_FLAG(std::string, dump_graph, "", "Write rank 0's compiled step graph (text IR) here");

namespace {

std::string DefaultDataPath(const char* argv0) {
  // `bazel run` starts us in the runfiles tree, where the data dependency lives.
  for (std::string candidate : {std::string("examples/data/shakespeare_sonnets.txt"),
                                std::string(argv0) + ".runfiles/magi/examples/data/shakespeare_sonnets.txt"}) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return "examples/data/shakespeare_sonnets.txt";
}

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "\n[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}
#define MAGI_OR_FAIL(expr) \
  if (absl::Status status_ = (expr); !status_.ok()) return Fail(rank, status_.message())

// The model's shape by --model (tiny and small train on the bytes of the text).
absl::StatusOr<magi::models::LlamaConfig> ModelConfig(const std::string& model, int seq) {
  magi::models::LlamaConfig config = magi::models::LlamaConfig::Tiny();
  if (model == "small") {
    config = magi::models::LlamaConfig::Small();
  } else if (model == "1b") {
    config = magi::models::LlamaConfig::Llama1B();
  } else if (model != "tiny") {
    return absl::InvalidArgumentError(absl::StrCat("unknown --model=", model, " (tiny, small or 1b)"));
  }
  if (model != "1b") config.vocab_size = 256;  // bytes of the text
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  return config;
}

int Train(const magi::DistributedEnv& env, const char* argv0) {
  const int rank = env.rank;
  // Ranks on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    torch::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, env.world_size)));
  }
  const std::string device_flag = absl::GetFlag(FLAGS_device), out_dir = absl::GetFlag(FLAGS_out_dir);
  if (device_flag != "cpu" && device_flag != "cuda") return Fail(rank, "--device must be cpu or cuda");
  const magi::CompileOptions compile = magi::CompileOptionsFromFlags(device_flag);
  if (compile.deterministic) {
    // Before anything touches CUDA, cuBLAS or NCCL (they read these settings when they start).
    absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();
    if (!settings.ok()) return Fail(rank, settings.status().message());
    if (rank == 0) std::fprintf(stderr, "magi: deterministic mode: %s\n", settings->c_str());
  }
  // Made before training so that an unwritable --out_dir fails now, not after the last step.
  std::error_code dir_error;
  if (rank == 0 && (std::filesystem::create_directories(out_dir, dir_error), dir_error)) {
    return Fail(rank, absl::StrCat("cannot create --out_dir ", out_dir, ": ", dir_error.message()));
  }
  const torch::Device device =
      device_flag == "cuda" ? torch::Device(torch::kCUDA, env.local_rank) : torch::Device(torch::kCPU);
  const std::string model_flag = absl::GetFlag(FLAGS_model), dtype_flag = absl::GetFlag(FLAGS_dtype);
  const bool random_tokens = model_flag == "1b";
  const int seq = absl::GetFlag(FLAGS_seq_len) > 0 ? absl::GetFlag(FLAGS_seq_len) : (random_tokens ? 2048 : 64);
  const int local = absl::GetFlag(FLAGS_batch_size) > 0 ? absl::GetFlag(FLAGS_batch_size) : (random_tokens ? 4 : 8);
  const int steps = absl::GetFlag(FLAGS_steps), seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<magi::models::LlamaConfig> config = ModelConfig(model_flag, seq);
  if (!config.ok()) return Fail(rank, config.status().message());
  if (dtype_flag != "f32" && dtype_flag != "bf16") return Fail(rank, "--dtype must be f32 or bf16");
  const bool bf16 = dtype_flag == "bf16";
  // Checkpoint flags, before anything is built.
  if (absl::GetFlag(FLAGS_keep_checkpoints) < 0) return Fail(rank, "--keep_checkpoints must be >= 0 (0 keeps all)");
  if (absl::GetFlag(FLAGS_checkpoint_every) < 0) return Fail(rank, "--checkpoint_every must be >= 0 (0: at the end)");
  magi::CheckpointOptions checkpoint_options;  // what a resumed run must share with the saving one
  checkpoint_options.keep_last = absl::GetFlag(FLAGS_keep_checkpoints);
  checkpoint_options.config = absl::StrFormat("model=%s dtype=%s seq_len=%d seed=%d data=%s", model_flag, dtype_flag,
                                              seq, seed, random_tokens ? "random" : "text");
  checkpoint_options.global_batch = static_cast<int64_t>(env.world_size) * local;
  magi::examples::TrainCheckpoints checkpoints(out_dir + "/checkpoint", checkpoint_options);
  if (absl::GetFlag(FLAGS_checkpoint) && !absl::GetFlag(FLAGS_resume)) MAGI_OR_FAIL(checkpoints.RefuseEarlierRun());

  // The training text (tiny, small): byte windows of it are the batches.
  at::Tensor corpus;
  if (!random_tokens) {
    std::string data_path = absl::GetFlag(FLAGS_data).empty() ? DefaultDataPath(argv0) : absl::GetFlag(FLAGS_data);
    absl::StatusOr<std::string> text = magi::ReadFile(data_path);
    if (!text.ok()) return Fail(rank, text.status().message());
    if (static_cast<int64_t>(text->size()) < seq + 2) return Fail(rank, absl::StrCat(data_path, " is too short"));
    corpus = torch::from_blob(text->data(), {static_cast<int64_t>(text->size())}, torch::kUInt8).to(torch::kLong);
  }
  magi::examples::TrainMeshSpec mesh_spec{device_flag, absl::GetFlag(FLAGS_communicator), absl::GetFlag(FLAGS_mesh)};
  absl::StatusOr<magi::ReshardAfterForwardOption> reshard =
      magi::ReshardAfterForwardOption::Parse(absl::GetFlag(FLAGS_reshard_after_forward));
  if (!reshard.ok()) return Fail(rank, absl::StrCat("--", reshard.status().message()));
  mesh_spec.reshard_after_forward = *reshard;
  mesh_spec.deterministic = compile.deterministic;
  mesh_spec.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  absl::StatusOr<magi::examples::TrainMesh> mesh = magi::examples::CreateTrainMesh(env, mesh_spec);
  if (!mesh.ok()) return Fail(rank, mesh.status().message());
  const std::string init_flag = absl::GetFlag(FLAGS_init);
  if (init_flag != "device" && init_flag != "meta") return Fail(rank, "--init must be device or meta");
  const bool meta_init = init_flag == "meta";
  const int grad_accum = absl::GetFlag(FLAGS_grad_accum);
  if (grad_accum < 1 || local % grad_accum != 0) {
    return Fail(rank, absl::StrCat("--grad_accum=", grad_accum, " must divide the ", local, " sequences per rank"));
  }

  torch::manual_seed(seed);
  const torch::Dtype dtype = bf16 ? torch::kBFloat16 : torch::kFloat;
  magi::models::Llama model(*config, torch::TensorOptions().device(meta_init ? torch::kMeta : device).dtype(dtype));
  magi::FullyShardOptions shard_options;
  shard_options.reshard_after_forward = *reshard;
  shard_options.cpu_offload = absl::GetFlag(FLAGS_cpu_offload);
  if (bf16) shard_options.mixed_precision = {magi::DType::kBFloat16, magi::DType::kFloat32};
  for (auto& layer : model->layers) magi::FullyShard(*layer, mesh->mesh, shard_options);
  magi::FullyShard(*model, mesh->mesh, shard_options);
  // Batch of step s: global random windows of the text, or random tokens (--model=1b), the
  // same on every rank (token_batches.h: a stream indexed by step); rows [first, first + count).
  const magi::examples::TokenBatches stream =
      random_tokens ? magi::examples::TokenBatches::RandomTokens(config->vocab_size, seq, seed, device)
                    : magi::examples::TokenBatches::TextWindows(corpus.to(device), seq, seed);
  const int64_t global_batch = checkpoint_options.global_batch;
  auto global = [&](int step) { return stream.Rows(step, global_batch, 0, global_batch); };
  auto batch = [&](int step) { return stream.Rows(step, global_batch, rank * local, local); };
  // The loss in fp32 (bf16 logits are cast first, as PyTorch mixed-precision recipes do).
  magi::LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return magi::models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
  };
  const std::string dump_dir = absl::GetFlag(FLAGS_dump_dir);
  if (rank == 0 && !dump_dir.empty()) {
    if (meta_init) return Fail(rank, "--dump_dir needs --init=device (the weights are written from the module)");
    magi::examples::NamedTensors weights;
    for (const auto& item : model->named_parameters()) weights.emplace_back(item.key(), item.value().to(torch::kFloat));
    MAGI_OR_FAIL(magi::examples::WriteInitialDump(dump_dir, weights, steps, global));
    std::fprintf(stderr, "magi: wrote the initial weights and %d batches to %s\n", steps, dump_dir.c_str());
  }
  magi::AdamWOptions adamw;
  adamw.lr = absl::GetFlag(FLAGS_lr);
  auto compile_start = std::chrono::steady_clock::now();
  if (rank == 0 && compile.optimization.memory_budget_bytes > 0) {
    std::fprintf(stderr, "magi: searching a strategy for %.3f GB per rank...\n",
                 compile.optimization.memory_budget_bytes / 1e9);
  }
  magi::TrainingOptions training;
  training.grad_accum = grad_accum;
  training.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  training.lr_schedule = {*magi::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule)),  // validated in main
                          absl::GetFlag(FLAGS_warmup_steps), steps, absl::GetFlag(FLAGS_min_lr)};
  if (meta_init) training.init_seed = seed;
  training.calibration = magi::CalibrationFromFlags();
  training.split_master_weights = absl::GetFlag(FLAGS_split_master_weights);
  magi::CaptureOptions capture_options;
  if (meta_init)
    capture_options.device = device.is_cuda() ? magi::Device{magi::DeviceType::kCuda, device.index()}
                                              : magi::Device{magi::DeviceType::kCpu, -1};
  std::vector<at::Tensor> example = batch(0);  // one micro-batch
  for (at::Tensor& tensor : example) tensor = tensor.narrow(0, 0, local / grad_accum).contiguous();
  auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example, mesh->communicators, adamw, capture_options,
                                           compile, training);
  if (!trainer.ok()) return Fail(rank, trainer.status().message());
  (*trainer)->ReleaseModuleParameters();  // the trainer holds this rank's shards; the replica only costs memory
  if (rank == 0) std::fprintf(stderr, "%s", (*trainer)->strategy_report().c_str());
  if (rank == 0 && !absl::GetFlag(FLAGS_dump_graph).empty()) {
    MAGI_OR_FAIL(magi::WriteFileAtomically(absl::GetFlag(FLAGS_dump_graph), magi::PrintModule((*trainer)->module())));
  }
  const magi::SimulationResult& predicted = (*trainer)->prediction();
  double compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  if (rank == 0) {
    std::fprintf(stderr, "magi: %s, %.2f M parameters, %d ranks; %s, compiled in %.1f s\n", config->ToString().c_str(),
                 config->NumParameters() / 1e6, env.world_size,
                 magi::examples::DescribeStepGraph((*trainer)->graph()).c_str(), compile_seconds);
    if (!(*trainer)->calibration_summary().empty()) {
      std::fprintf(stderr, "magi: %s\n", (*trainer)->calibration_summary().c_str());
    }
    std::fprintf(stderr, "magi: pipeline %s; predicted step %.1f ms, peak %.2f MB per rank (%s profile%s)\n",
                 (*trainer)->applied_pipeline().empty() ? "(none)" : (*trainer)->applied_pipeline().c_str(),
                 predicted.step_seconds * 1e3, predicted.peak_bytes / 1e6, compile.cost_model.device_profile.c_str(),
                 magi::examples::CalibrationNote(training.calibration).c_str());
    std::fprintf(stderr, "magi: plan %s: %s per step%s\n", (*trainer)->plan_hash().c_str(),
                 magi::DescribeCollectives((*trainer)->graph()).c_str(),
                 compile.deterministic ? absl::StrFormat(" (the same on all %d ranks)", env.world_size).c_str() : "");
  }

  const bool check_eager = absl::GetFlag(FLAGS_check_eager);
  std::unique_ptr<magi::examples::EagerReference> reference;
  if (check_eager) {
    reference = magi::examples::EagerReference::Create(*config, seed, meta_init ? torch::Device(torch::kCPU) : device,
                                                       dtype, device, adamw);
  }
  int first_step = 0;
  if (absl::GetFlag(FLAGS_resume)) {
    if (check_eager) return Fail(rank, "--check_eager cannot be combined with --resume");
    absl::StatusOr<int> resumed = checkpoints.Resume(**trainer, rank, mesh->shards, env.world_size, local, steps);
    if (!resumed.ok()) return Fail(rank, resumed.status().message());
    first_step = *resumed;
  }
  magi::examples::TrainLoopOptions loop_options;
  loop_options.rank = rank;
  loop_options.device = device;
  loop_options.first_step = first_step;
  loop_options.steps = steps;
  loop_options.untimed_steps = std::max(0, absl::GetFlag(FLAGS_untimed_steps));
  loop_options.tokens_per_step = global_batch * seq;
  loop_options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint) ? absl::GetFlag(FLAGS_checkpoint_every) : 0;
  loop_options.trace = absl::GetFlag(FLAGS_trace);
  loop_options.kernel_trace = absl::GetFlag(FLAGS_kernel_trace);
  loop_options.calibrate = rank == 0 && !absl::GetFlag(FLAGS_calibration_out).empty();
  loop_options.clip_grad_norm = training.clip_grad_norm;
  (*trainer)->set_profile_nodes(loop_options.calibrate);
  magi::examples::TrainLoop loop(loop_options);
  MAGI_OR_FAIL(
      loop.Run(**trainer, *mesh->all, batch, global, reference.get(), [&] { return checkpoints.Save(**trainer); }));
  if (!dump_dir.empty()) {  // the losses and final parameters, for `magi compare` (a collective)
    absl::StatusOr<magi::examples::NamedTensors> final_weights = (*trainer)->GatherFullParameters();
    if (!final_weights.ok()) return Fail(rank, final_weights.status().message());
    if (rank == 0) MAGI_OR_FAIL(magi::examples::WriteFinalDump(dump_dir, loop.losses(), *final_weights));
  }
  // The last step, committed: every rank's shards, moments and state, then the manifest.
  if (absl::GetFlag(FLAGS_checkpoint)) MAGI_OR_FAIL(checkpoints.Save(**trainer));
  if (rank != 0) return 0;
  if (std::filesystem::create_directories(out_dir, dir_error), dir_error) {  // none yet with --checkpoint=false
    return Fail(rank, absl::StrCat("cannot create ", out_dir, ": ", dir_error.message()));
  }
  magi::examples::Summary summary = loop.SummaryOf(**trainer);
  summary.world_size = env.world_size;
  summary.memory_budget_bytes = compile.optimization.memory_budget_bytes;
  summary.backend = compile.backend;
  summary.model = model_flag;
  summary.dtype = dtype_flag;
  summary.compile_seconds = compile_seconds;
  summary.deterministic = compile.deterministic;
  summary.calibration = training.calibration;
  summary.global_batch = global_batch;
  summary.resumed_from_step = absl::GetFlag(FLAGS_resume) ? first_step : -1;
  summary.resumed_world_size = checkpoints.resumed_world_size();
  summary.resumed_global_batch = checkpoints.resumed_global_batch();
  const std::string json = magi::examples::SummaryJson(summary);
  for (const auto& [path, contents] :
       std::vector<std::pair<std::string, std::string>>{{out_dir + "/loss.csv", magi::examples::LossCsv(loop.curve())},
                                                        {out_dir + "/loss.svg", magi::examples::LossSvg(loop.curve())},
                                                        {out_dir + "/summary.json", json}}) {
    MAGI_OR_FAIL(magi::WriteFileAtomically(path, contents));
  }
  if (!absl::GetFlag(FLAGS_summary_json).empty()) {
    MAGI_OR_FAIL(magi::WriteFileAtomically(absl::GetFlag(FLAGS_summary_json), json));
  }
  std::fprintf(stderr, "%s",
               magi::examples::FinalReport(summary, loop.seconds(), out_dir, loop.energy().measured()).c_str());
  if (std::string note = (*trainer)->FinishStepCalibration(); !note.empty()) {
    std::fprintf(stderr, "magi: %s\n", note.c_str());
  }
  std::fprintf(stderr, "%s", magi::examples::StepGraphReport(summary).c_str());
  if (loop_options.calibrate) {
    MAGI_OR_FAIL(loop.calibration().Save(absl::GetFlag(FLAGS_calibration_out)));
    std::fprintf(stderr, "wrote %zu measured op times to %s\n", loop.calibration().size(),
                 absl::GetFlag(FLAGS_calibration_out).c_str());
  }
  return 0;
}

// The numeric flags' ranges, checked once before any process starts. absl parses "nan" and
// "inf" into double flags, and NaN passes every `x < 0` check: --memory_budget_gb=nan would reach
// the byte conversion undefined, --clip_grad_norm=nan would switch clipping off silently.
absl::Status ValidateNumericFlags() {
  struct DoubleFlag {
    const char* name;
    double value;
    bool zero_allowed;
  };
  const DoubleFlag doubles[] = {
      {"lr", absl::GetFlag(FLAGS_lr), false},
      {"min_lr", absl::GetFlag(FLAGS_min_lr), true},
      {"clip_grad_norm", absl::GetFlag(FLAGS_clip_grad_norm), true},
  };
  for (const DoubleFlag& flag : doubles) {
    if (!std::isfinite(flag.value) || flag.value < 0 || (!flag.zero_allowed && flag.value == 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", flag.value, ": expected a ",
                                                     flag.zero_allowed ? "non-negative" : "positive",
                                                     ", finite number"));
    }
  }
  struct IntFlag {
    const char* name;
    int value;
    int min;
  };
  const IntFlag ints[] = {
      {"world_size", absl::GetFlag(FLAGS_world_size), 1},       {"steps", absl::GetFlag(FLAGS_steps), 1},
      {"batch_size", absl::GetFlag(FLAGS_batch_size), 0},       {"seq_len", absl::GetFlag(FLAGS_seq_len), 0},
      {"untimed_steps", absl::GetFlag(FLAGS_untimed_steps), 0}, {"warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0},
      {"grad_accum", absl::GetFlag(FLAGS_grad_accum), 1},       {"timeout_s", absl::GetFlag(FLAGS_timeout_s), 1},
  };
  for (const IntFlag& flag : ints) {
    if (flag.value < flag.min) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", flag.value, ": must be >= ", flag.min));
    }
  }
  if (absl::StatusOr<magi::LrSchedule::Kind> kind = magi::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule));
      !kind.ok()) {
    return kind.status();
  }
  return magi::ValidateCompileFlags();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = magi::ParseExampleFlags(
      argc, argv,
      "Trains the Llama-style model with FSDP on the Shakespeare sonnets, on local processes (or as a worker of "
      "torchrun / srun).\n  tools/bazel run //examples:train -- [--world_size=2] [--steps=N] [--model=tiny|small|1b] "
      "...",
      "examples/train.cc");
  if (absl::Status flags = ValidateNumericFlags(); !flags.ok()) return Fail(0, flags.message());
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(absl::GetFlag(FLAGS_world_size), argc, argv)) {
    return *code;
  }
  return Train(*env, argv[0]);
}
