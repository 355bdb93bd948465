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
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <torch/cuda.h>
#ifdef MAGI_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "examples/flags_usage.h"
#include "examples/tensor_file.h"
#include "examples/token_batches.h"
#include "magi/base/file.h"
#include "magi/base/numbers.h"
#include "magi/compat/kernel_trace.h"
#include "magi/cost/calibration.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/ir/printer.h"
#include "magi/models/llama.h"
#include "magi/runtime/deterministic/deterministic.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/nvml/gpu_energy.h"
#include "magi/backend/communicator.h"

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
ABSL_FLAG(int, untimed_steps, 1,
          "Steps left out of the timing (compilation, allocator warm-up, CUDA graph capture)");
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
ABSL_FLAG(bool, deterministic, false,
          "Deterministic mode (docs/deterministic.md): bitwise-identical losses and parameters run after run on the "
          "same hardware kind and world size; prints the plan hash");
ABSL_FLAG(std::string, plan_hash, "",
          "Fail unless the compiled plan has this hash (e.g. the one an earlier --deterministic run printed)");
ABSL_FLAG(bool, split_master_weights, false,
          "Hold each fp32 master shard the step only casts to bf16 as its bf16 high half + low 16 bits "
          "(--dtype=bf16): the step computes with the high half, so its parameter casts go; the same training but "
          "for exact ties (docs/fsdp.md)");
ABSL_FLAG(double, lr, 3e-3, "AdamW learning rate");
ABSL_FLAG(std::string, device, "cpu", "cpu (Gloo collectives) or cuda (NCCL; needs a --config=cuda build)");
ABSL_FLAG(bool, check_eager, false,
          "Also train an eager LibTorch copy (torch::optim::AdamW, global batch) and report the loss difference");
ABSL_FLAG(std::string, backend, "interpreter", "Execution backend (see `magi registry`)");
ABSL_FLAG(std::string, communicator, "",
          "Collective library: gloo or nccl (default: gloo on cpu, nccl on cuda; nccl needs a --config=cuda build)");
ABSL_FLAG(std::string, partition_backends, "",
          "Comma-separated backends that take the parts of the step they accept, e.g. inductor or "
          "inductor{jobs=4},elementwise (see docs/backends.md)");
ABSL_FLAG(int, partition_min_nodes, 1, "Runs of fewer nodes stay with the primary backend");
ABSL_FLAG(int, partition_max_nodes, 0,
          "Longer runs are split into partitions of at most this many nodes (0: unbounded); bounds what one "
          "generated program costs to compile");
ABSL_FLAG(bool, partition_align_collectives, true,
          "Before partitioning, move collectives that sit inside fusible chains to the nearest GEMM or attention "
          "(pass align-collectives; docs/backends.md)");
ABSL_FLAG(bool, partition_recompute_fusible, true,
          "Before partitioning, recompute in the backward the elementwise activations whose inputs are saved anyway "
          "(silu, RMSNorm's normalized x), so the fused kernels neither write nor keep them (pass recompute-fusible; "
          "docs/backends.md)");
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
ABSL_FLAG(double, budget_gb, 0,
          "Memory budget per rank in GB: the strategy search picks bucketing, prefetch, resharding and recompute so "
          "the step's predicted peak fits (0: no search); on CUDA, PyTorch's GEMM workspaces (32 MiB per stream on "
          "an H200; the summary's predicted_library_device_bytes) come on top");
ABSL_FLAG(std::string, passes, "",
          "A pass pipeline to run on the step graph instead of the search, e.g. "
          "\"bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}\"");
ABSL_FLAG(std::string, device_profile, "",
          "Cost model device profile (cpu, h200 or a .profile file; default: "
          "cpu, or h200 with --device=cuda)");
ABSL_FLAG(std::string, calibration, "auto",
          "The cost model's measured op times: auto (measure the step's kernels that the cache "
          "${MAGI_CACHE_DIR:-~/.cache/magi}/calibration/ lacks, with short micro-runs on every rank, and cache them), "
          "none (the device profile's formulas alone), or a CSV from --calibration_out");
ABSL_FLAG(std::string, calibration_out, "", "Write the op times measured on rank 0 here (CSV) for later runs");
ABSL_FLAG(std::string, dump_graph, "", "Write rank 0's compiled step graph (text IR) here");

namespace {

// The energy rank 0's GPU used over the timed steps (NVML; docs/benchmarks.md, session 12:
// at the power cap a step takes as long as its energy allows). NVML is read twice per run:
// before the first timed step and once the timed steps are over (EndWindow), never between
// steps, since each read leaves the GPU idle and idle time lets a power-capped GPU run the
// next steps faster. The window so includes the loop's work between the steps (the loss
// all-reduce and read, the next batch): its length is reported with it. Where NVML cannot
// be read it says why and reports -1.
class TimedEnergy {
 public:
  void Open(int cuda_device) {
#ifdef MAGI_WITH_CUDA
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess) {
      cudaGetLastError();
      std::fprintf(stderr, "magi: GPU energy not measured: no PCI bus id for CUDA device %d\n", cuda_device);
      return;
    }
    absl::StatusOr<std::unique_ptr<magi::GpuEnergyMeter>> meter = magi::GpuEnergyMeter::Open(bus_id);
    absl::StatusOr<double> limit = meter.ok() ? (*meter)->PowerLimitWatts() : meter.status();
    if (!limit.ok()) {
      std::fprintf(stderr, "magi: GPU energy not measured: %s\n", std::string(limit.status().message()).c_str());
      return;
    }
    meter_ = *std::move(meter);
    limit_watts_ = *limit;
#else
    (void)cuda_device;
#endif
  }
  // Before each timed step, the device synchronized: the first starts the window.
  void BeforeTimedStep() {
    if (meter_ == nullptr || start_joules_ >= 0) return;
    start_joules_ = Read();
    start_time_ = std::chrono::steady_clock::now();
  }
  void AfterTimedStep() { ++steps_; }
  // Once the timed steps are over (before an untimed step after them, else after the loop).
  void EndWindow() {
    if (meter_ == nullptr || start_joules_ < 0 || end_joules_ >= 0) return;
    end_joules_ = Read();
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  }
  bool measured() const { return steps_ > 0 && start_joules_ >= 0 && end_joules_ >= start_joules_; }
  // JSON members for the summary (-1 where nothing was measured).
  std::string SummaryJson() const {
    const bool ok = measured() && seconds_ > 0;
    const double joules = ok ? end_joules_ - start_joules_ : -1;
    return absl::StrFormat(
        "\"gpu_joules_per_step\": %.3f, \"gpu_window_seconds\": %.4f, \"gpu_average_watts\": %.1f, "
        "\"gpu_power_limit_watts\": %.1f",
        ok ? joules / steps_ : -1.0, ok ? seconds_ : -1.0, ok ? joules / seconds_ : -1.0, ok ? limit_watts_ : -1.0);
  }

 private:
  double Read() {
    absl::StatusOr<double> joules = meter_->TotalJoules();
    if (joules.ok()) return *joules;
    std::fprintf(stderr, "magi: GPU energy not measured: %s\n", std::string(joules.status().message()).c_str());
    meter_.reset();
    return -1;
  }

  std::unique_ptr<magi::GpuEnergyMeter> meter_;
  double limit_watts_ = -1, start_joules_ = -1, end_joules_ = -1, seconds_ = -1;
  int steps_ = 0;
  std::chrono::steady_clock::time_point start_time_;
};

std::string DefaultDataPath(const char* argv0) {
  // `bazel run` starts us in the runfiles tree, where the data dependency lives.
  for (std::string candidate : {std::string("examples/data/shakespeare_sonnets.txt"),
                                std::string(argv0) + ".runfiles/magi/examples/data/shakespeare_sonnets.txt"}) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return "examples/data/shakespeare_sonnets.txt";
}

std::string Svg(const std::vector<std::pair<int, double>>& points) {
  const double width = 640, height = 360, margin = 40;
  double max_loss = 0, min_loss = 1e30;
  for (const auto& [step, loss] : points) {
    max_loss = std::max(max_loss, loss);
    min_loss = std::min(min_loss, loss);
  }
  if (max_loss - min_loss < 1e-9) max_loss = min_loss + 1;
  int last = points.empty() ? 1 : std::max(1, points.back().first);
  std::string path;
  for (const auto& [step, loss] : points) {
    double x = margin + (width - 2 * margin) * step / last;
    double y = height - margin - (height - 2 * margin) * (loss - min_loss) / (max_loss - min_loss);
    absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", x, y);
  }
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">Magi FSDP training loss (%d "
      "steps)</text>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<text x=\"4\" y=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">%.2f</text>\n"
      "<text x=\"4\" y=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">%.2f</text>\n"
      "<path d=\"%s\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"1.5\"/>\n</svg>\n",
      width, height, margin, last, margin, height - margin, width - margin, height - margin, margin, margin, margin,
      height - margin, margin + 4, max_loss, height - margin, min_loss, path);
}

std::string Duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "\n[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}

// What a resume changes in the data, in one line ("" when nothing): the checkpoint was
// written by `saved_writers` ranks (one file each: the shard axis under HSDP) with
// `saved_global_batch` samples per step (0: not recorded); this run writes `writers` files
// and has `world` ranks of `local` samples, and trains steps first_step + 1 .. steps. The
// stream is indexed by step (token_batches.h), so a change only sets how many samples of
// each later step's draw are read.
std::string ResumeNote(int64_t saved_writers, int64_t saved_global_batch, int writers, int world, int local,
                       int first_step, int steps) {
  const int64_t global_batch = static_cast<int64_t>(world) * local;
  if (saved_writers == writers && (saved_global_batch == global_batch || saved_global_batch == 0)) return "";
  const std::string run = absl::StrFormat("%d rank%s x %d = %d samples per step", world, world == 1 ? "" : "s",
                                          local, global_batch);
  const std::string later = first_step + 1 >= steps ? absl::StrFormat("step %d", steps)
                                                    : absl::StrFormat("steps %d-%d", first_step + 1, steps);
  const std::string saved = absl::StrFormat("a checkpoint written by %d rank%s", saved_writers,
                                            saved_writers == 1 ? "" : "s");
  if (saved_global_batch == 0) {
    return absl::StrFormat("resumed %s that does not record its global batch; %s train with %s", saved, later, run);
  }
  if (saved_global_batch == global_batch) {
    return absl::StrFormat("resumed %s with %d samples per step on %s: the same global batch, the same samples in %s",
                           saved, saved_global_batch, run, later);
  }
  std::string note = absl::StrFormat(
      "resumed %s with %d samples per step on %s: the global batch changes from %d to %d; %s read samples 0-%d of "
      "each step's draw (the data stream is indexed by step: the first %d are the ones the saving run would have "
      "read, and no sample of steps 1-%d is read again)",
      saved, saved_global_batch, run, saved_global_batch, global_batch, later, global_batch - 1,
      std::min(saved_global_batch, global_batch), first_step);
  if (saved_global_batch % world == 0) {
    absl::StrAppendFormat(&note, "; --batch_size=%d keeps the global batch of %d", saved_global_batch / world,
                          saved_global_batch);
  }
  return note;
}

int Train(const magi::DistributedEnv& env, const char* argv0) {
  const int rank = env.rank;
  // Ranks on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    torch::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, env.world_size)));
  }
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (device_flag != "cpu" && device_flag != "cuda") return Fail(rank, "--device must be cpu or cuda");
  const bool deterministic = absl::GetFlag(FLAGS_deterministic);
  if (deterministic) {
    // Before anything touches CUDA, cuBLAS or NCCL (they read these settings when they start).
    absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();
    if (!settings.ok()) return Fail(rank, settings.status().message());
    if (rank == 0) std::fprintf(stderr, "magi: deterministic mode: %s\n", settings->c_str());
  }
  // Made before training so that an unwritable --out_dir fails now, not after the last step.
  if (rank == 0) {
    std::error_code error;
    std::filesystem::create_directories(absl::GetFlag(FLAGS_out_dir), error);
    if (error) return Fail(rank, absl::StrCat("cannot create --out_dir ", absl::GetFlag(FLAGS_out_dir), ": ", error.message()));
  }
  const torch::Device device =
      device_flag == "cuda" ? torch::Device(torch::kCUDA, env.local_rank) : torch::Device(torch::kCPU);
  const std::string model_flag = absl::GetFlag(FLAGS_model);
  const bool random_tokens = model_flag == "1b";
  const int seq = absl::GetFlag(FLAGS_seq_len) > 0 ? absl::GetFlag(FLAGS_seq_len) : (random_tokens ? 2048 : 64);
  const int local = absl::GetFlag(FLAGS_batch_size) > 0 ? absl::GetFlag(FLAGS_batch_size) : (random_tokens ? 4 : 8);
  magi::models::LlamaConfig config = magi::models::LlamaConfig::Tiny();
  if (model_flag == "small") {
    config = magi::models::LlamaConfig::Small();
  } else if (model_flag == "1b") {
    config = magi::models::LlamaConfig::Llama1B();
  } else if (model_flag != "tiny") {
    return Fail(rank, absl::StrCat("unknown --model=", model_flag, " (tiny, small or 1b)"));
  }
  if (!random_tokens) config.vocab_size = 256;  // bytes of the text
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  const std::string dtype_flag = absl::GetFlag(FLAGS_dtype);
  if (dtype_flag != "f32" && dtype_flag != "bf16") return Fail(rank, "--dtype must be f32 or bf16");
  const bool bf16 = dtype_flag == "bf16";
  // Checkpoint flags, before anything is built. A run that does not resume never writes
  // into another run's checkpoints: its steps would interleave with theirs.
  if (absl::GetFlag(FLAGS_keep_checkpoints) < 0) return Fail(rank, "--keep_checkpoints must be >= 0 (0 keeps all)");
  if (absl::GetFlag(FLAGS_checkpoint_every) < 0) return Fail(rank, "--checkpoint_every must be >= 0 (0: at the end)");
  if (absl::GetFlag(FLAGS_checkpoint) && !absl::GetFlag(FLAGS_resume)) {
    const std::string dir = absl::GetFlag(FLAGS_out_dir) + "/checkpoint";
    absl::StatusOr<std::optional<magi::CommittedStep>> earlier = magi::FindNewestCommittedStep(dir);
    if (!earlier.ok()) return Fail(rank, earlier.status().message());
    if (earlier->has_value()) {
      return Fail(rank, absl::StrCat((*earlier)->dir, " is a committed checkpoint of an earlier run (step ",
                                     (*earlier)->manifest.step(), "): pass --resume to continue it, or another ",
                                     "--out_dir (or remove ", dir, ") to start anew"));
    }
  }

  // The training text (tiny, small): byte windows of it are the batches.
  at::Tensor corpus, corpus_on_device;
  if (!random_tokens) {
    std::string data_path = absl::GetFlag(FLAGS_data).empty() ? DefaultDataPath(argv0) : absl::GetFlag(FLAGS_data);
    absl::StatusOr<std::string> text = magi::ReadFile(data_path);
    if (!text.ok()) return Fail(rank, text.status().message());
    if (static_cast<int64_t>(text->size()) < seq + 2) return Fail(rank, absl::StrCat(data_path, " is too short"));
    corpus = torch::from_blob(text->data(), {static_cast<int64_t>(text->size())}, torch::kUInt8).to(torch::kLong);
    corpus_on_device = corpus.to(device);
  }

  auto store = magi::ConnectStore(env, std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!store.ok()) return Fail(rank, store.status().message());
  auto timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  std::string communicator_name = absl::GetFlag(FLAGS_communicator);
  if (communicator_name.empty()) {
    absl::StatusOr<std::string> by_device = magi::DefaultCommunicatorFor(device_flag);
    if (!by_device.ok()) return Fail(rank, by_device.status().message());
    communicator_name = *by_device;
  }
  magi::CommunicatorOptions communicator_options;
  communicator_options.store = *store;
  communicator_options.rank = rank;
  communicator_options.size = env.world_size;
  communicator_options.group_name = "dp";
  communicator_options.device_index = env.local_rank;
  communicator_options.timeout = timeout;
  communicator_options.deterministic = deterministic;
  absl::StatusOr<std::shared_ptr<magi::Communicator>> communicator =
      magi::CreateCommunicator(communicator_name, communicator_options);
  if (!communicator.ok()) {
    return Fail(rank, absl::StrCat("--communicator=", communicator_name, ": ", communicator.status().message(),
                                   communicator_name == "nccl" ? " (NCCL needs a build with --config=cuda)" : ""));
  }
  // The mesh: 1-D over every rank (the communicator above), or R x S (HSDP) with one
  // communicator per axis; `communicator` stays the all-ranks one the losses are averaged on.
  const std::string mesh_flag = absl::GetFlag(FLAGS_mesh);
  absl::StatusOr<magi::DeviceMesh> mesh = magi::DeviceMesh::Create({env.world_size}, {"dp"}, rank);
  magi::MeshCommunicators mesh_communicators = {{"dp", *communicator}};
  int shards = env.world_size;  // ranks on the shard axis: those that write checkpoint files
  if (!mesh_flag.empty()) {
    std::vector<std::string> parts = absl::StrSplit(mesh_flag, 'x');
    int replicas = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &replicas) || !absl::SimpleAtoi(parts[1], &shards) ||
        replicas * shards != env.world_size) {
      return Fail(rank, absl::StrCat("--mesh=", mesh_flag, ": expected RxS with R * S = ", env.world_size));
    }
    mesh = magi::DeviceMesh::Create({replicas, shards}, {"replicate", "shard"}, rank);
    if (!mesh.ok()) return Fail(rank, mesh.status().message());
    absl::StatusOr<magi::MeshCommunicators> created =
        magi::CreateMeshCommunicators(*mesh, communicator_name, communicator_options);
    if (!created.ok()) return Fail(rank, created.status().message());
    mesh_communicators = *std::move(created);
  }
  if (!mesh.ok()) return Fail(rank, mesh.status().message());
  absl::StatusOr<magi::ReshardAfterForwardOption> reshard =
      magi::ReshardAfterForwardOption::Parse(absl::GetFlag(FLAGS_reshard_after_forward));
  if (!reshard.ok()) return Fail(rank, absl::StrCat("--", reshard.status().message()));
  if (reshard->size()) {  // the post-forward groups backward gathers over
    absl::StatusOr<magi::MeshCommunicators> post_forward =
        magi::CreatePostForwardCommunicators(*mesh, communicator_name, communicator_options, {*reshard->size()});
    if (!post_forward.ok()) {
      return Fail(rank, absl::StrCat("--reshard_after_forward=", reshard->ToString(), ": ",
                                     post_forward.status().message()));
    }
    mesh_communicators.merge(*post_forward);
  }
  const std::string init_flag = absl::GetFlag(FLAGS_init);
  if (init_flag != "device" && init_flag != "meta") return Fail(rank, "--init must be device or meta");
  const bool meta_init = init_flag == "meta";
  const int grad_accum = absl::GetFlag(FLAGS_grad_accum);
  if (grad_accum < 1 || local % grad_accum != 0) {
    return Fail(rank, absl::StrCat("--grad_accum=", grad_accum, " must divide the ", local, " sequences per rank"));
  }

  torch::manual_seed(absl::GetFlag(FLAGS_seed));
  magi::models::Llama model(config, torch::TensorOptions()
                                        .device(meta_init ? torch::Device(torch::kMeta) : device)
                                        .dtype(bf16 ? torch::kBFloat16 : torch::kFloat));
  magi::FullyShardOptions shard_options;
  shard_options.reshard_after_forward = *reshard;
  shard_options.cpu_offload = absl::GetFlag(FLAGS_cpu_offload);
  if (bf16) {
    shard_options.mixed_precision.param_dtype = magi::DType::kBFloat16;
    shard_options.mixed_precision.reduce_dtype = magi::DType::kFloat32;
  }
  for (auto& layer : model->layers) magi::FullyShard(*layer, *mesh, shard_options);
  magi::FullyShard(*model, *mesh, shard_options);

  // Batch of step s: global random windows of the text, or random tokens (--model=1b),
  // the same on every rank (token_batches.h: a stream indexed by step); rows [first,
  // first + count) of it.
  const magi::examples::TokenBatches stream =
      random_tokens ? magi::examples::TokenBatches::RandomTokens(config.vocab_size, seq, absl::GetFlag(FLAGS_seed), device)
                    : magi::examples::TokenBatches::TextWindows(corpus_on_device, seq, absl::GetFlag(FLAGS_seed));
  const int64_t global_batch = static_cast<int64_t>(env.world_size) * local;
  auto rows = [&](int step, int first, int count) { return stream.Rows(step, global_batch, first, count); };
  auto batch = [&](int step) { return rows(step, rank * local, local); };
  // The loss in fp32 (bf16 logits are cast first, as PyTorch mixed-precision recipes do).
  magi::LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return magi::models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
  };
  if (rank == 0 && !absl::GetFlag(FLAGS_dump_dir).empty()) {
    std::string dir = absl::GetFlag(FLAGS_dump_dir);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return Fail(rank, absl::StrCat("cannot create ", dir, ": ", error.message()));
    std::vector<std::pair<std::string, at::Tensor>> weights, batches;
    if (meta_init) return Fail(rank, "--dump_dir needs --init=device (the weights are written from the module)");
    for (const auto& item : model->named_parameters()) weights.emplace_back(item.key(), item.value().to(torch::kFloat));
    for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
      std::vector<at::Tensor> global = rows(step, 0, env.world_size * local);
      batches.emplace_back(absl::StrCat("step.", step, ".tokens"), global[0]);
      batches.emplace_back(absl::StrCat("step.", step, ".targets"), global[1]);
    }
    for (absl::Status written : {magi::WriteTensorFile(dir + "/weights", weights),
                                 magi::WriteTensorFile(dir + "/batches", batches)}) {
      if (!written.ok()) return Fail(rank, written.message());
    }
    std::fprintf(stderr, "magi: wrote the initial weights and %d batches to %s\n", absl::GetFlag(FLAGS_steps),
                 dir.c_str());
  }
  magi::AdamWOptions adamw;
  adamw.lr = absl::GetFlag(FLAGS_lr);
  auto compile_start = std::chrono::steady_clock::now();
  magi::StepOptimization optimization;
  optimization.passes = absl::GetFlag(FLAGS_passes);
  optimization.memory_budget_bytes = *magi::BytesFromDouble(absl::GetFlag(FLAGS_budget_gb) * 1e9);  // validated in main
  optimization.device_profile = absl::GetFlag(FLAGS_device_profile).empty() ? (device_flag == "cuda" ? "h200" : "cpu")
                                                                            : absl::GetFlag(FLAGS_device_profile);
  optimization.calibration = absl::GetFlag(FLAGS_calibration);
  // Commas inside a spec's braces separate its options, not specs.
  std::string spec;
  int depth = 0;
  for (char c : absl::GetFlag(FLAGS_partition_backends) + ",") {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (c == ',' && depth == 0) {
      if (!spec.empty()) optimization.partition_backends.push_back(spec);
      spec.clear();
    } else {
      spec += c;
    }
  }
  optimization.deterministic = deterministic;
  optimization.expected_plan_hash = absl::GetFlag(FLAGS_plan_hash);
  optimization.split_master_weights = absl::GetFlag(FLAGS_split_master_weights);
  optimization.partition_min_nodes = absl::GetFlag(FLAGS_partition_min_nodes);
  optimization.partition_max_nodes = absl::GetFlag(FLAGS_partition_max_nodes);
  optimization.partition_align_collectives = absl::GetFlag(FLAGS_partition_align_collectives);
  optimization.partition_recompute_fusible = absl::GetFlag(FLAGS_partition_recompute_fusible);
  if (rank == 0 && optimization.memory_budget_bytes > 0) {
    std::fprintf(stderr, "magi: searching a strategy for %.3f GB per rank...\n", absl::GetFlag(FLAGS_budget_gb));
  }
  magi::TrainingOptions training;
  training.grad_accum = grad_accum;
  training.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  absl::StatusOr<magi::LrSchedule::Kind> schedule_kind = magi::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule_kind.ok()) return Fail(rank, schedule_kind.status().message());
  training.lr_schedule.kind = *schedule_kind;
  training.lr_schedule.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  training.lr_schedule.total_steps = absl::GetFlag(FLAGS_steps);
  training.lr_schedule.min_lr = absl::GetFlag(FLAGS_min_lr);
  if (meta_init) training.init_seed = absl::GetFlag(FLAGS_seed);
  magi::CaptureOptions capture_options;
  if (meta_init) capture_options.device = device.is_cuda() ? magi::Device{magi::DeviceType::kCuda, device.index()}
                                                           : magi::Device{magi::DeviceType::kCpu, -1};
  std::vector<at::Tensor> example = batch(0);  // one micro-batch
  for (at::Tensor& tensor : example) tensor = tensor.narrow(0, 0, local / grad_accum).contiguous();
  auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example, mesh_communicators, adamw, capture_options,
                                           absl::GetFlag(FLAGS_backend), optimization, training);
  if (!trainer.ok()) return Fail(rank, trainer.status().message());
  (*trainer)->ReleaseModuleParameters();  // the trainer holds this rank's shards; the replica only costs memory
  if (rank == 0 && !(*trainer)->strategy_report().empty())
    std::fprintf(stderr, "%s", (*trainer)->strategy_report().c_str());
  if (rank == 0 && !absl::GetFlag(FLAGS_dump_graph).empty()) {
    absl::Status dumped =
        magi::WriteFileAtomically(absl::GetFlag(FLAGS_dump_graph), magi::PrintModule((*trainer)->module()));
    if (!dumped.ok()) return Fail(rank, dumped.message());
  }
  const magi::SimulationResult& predicted = (*trainer)->prediction();
  const bool calibrate = rank == 0 && !absl::GetFlag(FLAGS_calibration_out).empty();
  magi::CalibrationTable calibration;
  (*trainer)->set_profile_nodes(calibrate);
  double compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  if (rank == 0) {
    int gathers = 0, scatters = 0;
    for (const magi::Node* node : (*trainer)->graph().nodes()) {
      gathers += node->op() == magi::kAllGatherStartOp;
      scatters += node->op() == magi::kReduceScatterStartOp;
    }
    std::fprintf(stderr,
                 "magi: %s, %.2f M parameters, %d ranks; one step graph of %d nodes (%d all-gathers, %d "
                 "reduce-scatters), compiled in %.1f s\n",
                 config.ToString().c_str(), config.NumParameters() / 1e6, env.world_size,
                 (*trainer)->graph().num_nodes(), gathers, scatters, compile_seconds);
    if (!(*trainer)->calibration_summary().empty()) {
      std::fprintf(stderr, "magi: %s\n", (*trainer)->calibration_summary().c_str());
    }
    std::fprintf(stderr, "magi: pipeline %s; predicted step %.1f ms, peak %.2f MB per rank (%s profile%s)\n",
                 (*trainer)->applied_pipeline().empty() ? "(none)" : (*trainer)->applied_pipeline().c_str(),
                 predicted.step_seconds * 1e3, predicted.peak_bytes / 1e6, optimization.device_profile.c_str(),
                 optimization.calibration == "none" ? ", uncalibrated"
                 : optimization.calibration == "auto" ? ", calibrated"
                                                      : (", calibrated by " + optimization.calibration).c_str());
    std::fprintf(stderr, "magi: plan %s: %s per step%s\n", (*trainer)->plan_hash().c_str(),
                 magi::DescribeCollectives((*trainer)->graph()).c_str(),
                 deterministic ? absl::StrFormat(" (the same on all %d ranks)", env.world_size).c_str() : "");
  }

  // The eager reference: same initial weights, the global batch, LibTorch's AdamW.
  const bool check_eager = absl::GetFlag(FLAGS_check_eager);
  magi::models::Llama reference{nullptr};
  std::unique_ptr<torch::optim::AdamW> reference_optimizer;
  double worst_relative = 0;
  if (check_eager) {
    torch::manual_seed(absl::GetFlag(FLAGS_seed));
    // The reference draws its initial weights as the model did: in the model's dtype (a bf16
    // draw is not the rounding of an fp32 one: LibTorch's CPU normal_ samples in another
    // order), on the device the weights were drawn on (the host with --init=meta, whose
    // shards are materialized from the seed's CPU generator: materialize.h). It then trains
    // in fp32 where the step computes.
    reference = magi::models::Llama(config, torch::TensorOptions()
                                                .device(meta_init ? torch::Device(torch::kCPU) : device)
                                                .dtype(bf16 ? torch::kBFloat16 : torch::kFloat));
    reference->to(device, torch::kFloat);
    reference_optimizer =
        std::make_unique<torch::optim::AdamW>(reference->parameters(), torch::optim::AdamWOptions(adamw.lr)
                                                                           .betas({adamw.beta1, adamw.beta2})
                                                                           .eps(adamw.eps)
                                                                           .weight_decay(adamw.weight_decay));
  }

  const int steps = absl::GetFlag(FLAGS_steps);
  std::string checkpoint_dir = absl::GetFlag(FLAGS_out_dir) + "/checkpoint";
  // What a resumed run must share with the run that saved (the world size may differ).
  magi::CheckpointOptions checkpoint_options;
  checkpoint_options.keep_last = absl::GetFlag(FLAGS_keep_checkpoints);
  checkpoint_options.config = absl::StrFormat("model=%s dtype=%s seq_len=%d seed=%d data=%s", model_flag, dtype_flag,
                                              seq, absl::GetFlag(FLAGS_seed),
                                              random_tokens ? "random" : "text");
  checkpoint_options.global_batch = global_batch;
  int first_step = 0;
  int64_t resumed_world_size = 0, resumed_global_batch = 0;  // of the checkpoint resumed from (0: none)
  int64_t committed_step = -1;  // the step of the newest committed checkpoint this run knows of
  if (absl::GetFlag(FLAGS_resume)) {
    if (check_eager) return Fail(rank, "--check_eager cannot be combined with --resume");
    absl::Status loaded = (*trainer)->LoadCheckpoint(checkpoint_dir, checkpoint_options.config);
    if (!loaded.ok()) return Fail(rank, loaded.message());
    first_step = static_cast<int>((*trainer)->steps_taken());
    committed_step = first_step;
    if (rank == 0) {
      std::fprintf(stderr, "magi: resumed from %s/%s at step %d\n", checkpoint_dir.c_str(),
                   magi::StepFolderName(first_step).c_str(), first_step);
    }
    if (rank == 0) {
      // The step the ranks agreed on and loaded (rank 0 cleaned up after the load; no rank
      // writes before the first save). Rank 0 alone prints and writes the summary.
      // A failure here is reported, not fatal: the other ranks are past the load already.
      absl::StatusOr<std::optional<magi::CommittedStep>> loaded_step = magi::FindNewestCommittedStep(checkpoint_dir);
      if (loaded_step.ok() && loaded_step->has_value() && (*loaded_step)->manifest.step() == first_step) {
        resumed_world_size = (*loaded_step)->manifest.world_size();
        resumed_global_batch = (*loaded_step)->manifest.global_batch();
        std::string note =
            ResumeNote(resumed_world_size, resumed_global_batch, shards, env.world_size, local, first_step, steps);
        if (!note.empty()) std::fprintf(stderr, "magi: %s\n", note.c_str());
      } else {
        std::fprintf(stderr,
                     "magi: warning: cannot read the manifest of step %d again (%s): the summary records no "
                     "checkpoint world size or global batch\n",
                     first_step,
                     !loaded_step.ok()              ? std::string(loaded_step.status().message()).c_str()
                     : !loaded_step->has_value()    ? "no committed step is there now"
                                                    : "another step is the newest now");
      }
    }
  }
  // Commits the trainer's current step (collective: every rank calls it at the same step).
  auto save = [&]() -> absl::Status {
    if ((*trainer)->steps_taken() == committed_step) return absl::OkStatus();  // nothing new
    absl::Status saved = (*trainer)->SaveCheckpoint(checkpoint_dir, checkpoint_options);
    if (saved.ok()) committed_step = (*trainer)->steps_taken();
    return saved;
  };
  std::vector<std::pair<int, double>> curve;
  std::vector<double> step_losses;  // the mean loss of every step run here, for --dump_dir
  int64_t peak_bytes = 0;
  auto start = std::chrono::steady_clock::now();
  double initial_loss = 0, final_loss = 0;
  bool tty = isatty(2);
  double step_seconds_sum = 0;  // step wall time (device synchronized), after the warm-up steps
  std::vector<double> timed_step_seconds;  // each of those steps, for the summary
  double host_seconds_sum = 0;  // host time issuing those steps
  int timed_steps = 0;
  int64_t allocator_peak_bytes = -1;  // CUDA builds on a GPU only
  const int untimed_steps = std::max(0, absl::GetFlag(FLAGS_untimed_steps));
  TimedEnergy energy;
  if (rank == 0 && device.is_cuda()) energy.Open(device.index());
  for (int step = first_step; step < steps; ++step) {
    std::vector<at::Tensor> local_batch = batch(step);
    const double step_lr = (*trainer)->next_learning_rate();
    if (step + 1 == steps && !absl::GetFlag(FLAGS_trace).empty() && rank == 0) {
      absl::Status traced = (*trainer)->TraceNextStep(absl::GetFlag(FLAGS_trace));
      if (!traced.ok()) return Fail(rank, traced.message());
    }
    if (device.is_cuda()) torch::cuda::synchronize();
    std::unique_ptr<magi::compat::KernelTrace> kernel_trace;
    if (step + 1 == steps && !absl::GetFlag(FLAGS_kernel_trace).empty() && rank == 0) {
      energy.EndWindow();  // the traced step is not timed
      absl::StatusOr<std::unique_ptr<magi::compat::KernelTrace>> started =
          magi::compat::KernelTrace::Start(device.is_cuda());
      if (!started.ok()) return Fail(rank, started.status().message());
      kernel_trace = *std::move(started);
    }
#ifdef MAGI_WITH_CUDA
    // Peaks of the training steps (compilation ran the step eagerly once before); the
    // warm-up steps count, since a CUDA graph allocates its memory while it is captured.
    if (device.is_cuda() && step == first_step) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
    // A step recorded by Kineto is slowed by the recording: not timed.
    const bool timed = step >= first_step + untimed_steps && kernel_trace == nullptr;
    if (timed) energy.BeforeTimedStep();
    auto step_start = std::chrono::steady_clock::now();
    absl::StatusOr<double> local_loss = (*trainer)->Step(local_batch);
    if (!local_loss.ok()) return Fail(rank, local_loss.status().message());
    if (device.is_cuda()) torch::cuda::synchronize();  // kernels are asynchronous: time their completion
    double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (timed) energy.AfterTimedStep();
    if (kernel_trace != nullptr) {
      absl::Status written = kernel_trace->StopAndSave(absl::GetFlag(FLAGS_kernel_trace));
      if (!written.ok()) return Fail(rank, written.message());
      std::fprintf(stderr, "wrote the Kineto trace of step %d to %s\n", step + 1,
                   absl::GetFlag(FLAGS_kernel_trace).c_str());
    }
    const magi::RunStats& run = (*trainer)->last_run_stats();
    peak_bytes = std::max(peak_bytes, run.peak_live_bytes);
#ifdef MAGI_WITH_CUDA
    // On CUDA, the caching allocator's peak (what torch.cuda.max_memory_allocated reports
    // for PyTorch runs), so Magi's and PyTorch's numbers compare.
    if (device.is_cuda()) {
      auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
      allocator_peak_bytes = std::max<int64_t>(allocator_peak_bytes, stats.allocated_bytes[0].peak);
    }
#endif
    if (timed) {
      step_seconds_sum += step_seconds;
      timed_step_seconds.push_back(step_seconds);
      host_seconds_sum += run.host_seconds;
      ++timed_steps;
      if (calibrate) {
        absl::Status added = calibration.AddRun((*trainer)->graph(), run.node_seconds);
        if (!added.ok()) return Fail(rank, added.message());
      }
    }
    auto mean =
        (*communicator)
            ->Start(magi::CollectiveKind::kAllReduce,
                    {at::scalar_tensor(*local_loss, at::TensorOptions().dtype(at::kDouble).device(device))}, "avg");
    if (!mean.ok()) return Fail(rank, mean.status().message());
    auto reduced = (*mean)->Wait();
    if (!reduced.ok()) return Fail(rank, reduced.status().message());
    double loss = (*reduced)[0].item<double>();
    std::string eager_note;
    if (check_eager) {
      std::vector<at::Tensor> global = rows(step, 0, env.world_size * local);
      reference_optimizer->zero_grad();
      at::Tensor eager_loss = magi::models::LanguageModelLoss(reference->forward(global[0]), global[1]);
      eager_loss.backward();
      if (training.clip_grad_norm > 0) torch::nn::utils::clip_grad_norm_(reference->parameters(), training.clip_grad_norm);
      static_cast<torch::optim::AdamWOptions&>(reference_optimizer->param_groups()[0].options()).lr(step_lr);
      reference_optimizer->step();
      double expected = eager_loss.item<double>();
      double relative = std::abs(loss - expected) / std::max(1e-12, std::abs(expected));
      // A NaN loss on either side must show, not vanish in std::max.
      if (std::isnan(relative) || relative > worst_relative) worst_relative = relative;
      eager_note = absl::StrFormat(" | eager %.4f (rel diff %.1e)", expected, relative);
    }
    if (step == first_step) initial_loss = loss;
    final_loss = loss;
    step_losses.push_back(loss);
    curve.emplace_back(step + 1, loss);
    const int every = absl::GetFlag(FLAGS_checkpoint_every);
    if (absl::GetFlag(FLAGS_checkpoint) && every > 0 && (step + 1) % every == 0 && step + 1 < steps) {
      absl::Status saved = save();
      if (!saved.ok()) return Fail(rank, saved.message());
    }
    if (rank == 0) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      int done = step + 1 - first_step;
      double tokens_per_s = done * static_cast<double>(env.world_size) * local * seq / elapsed;
      double eta = elapsed / done * (steps - step - 1);
      std::string line = absl::StrFormat("step %d/%d | loss %.4f | %.0f tok/s | ETA %s%s", step + 1, steps, loss,
                                         tokens_per_s, Duration(eta), eager_note);
      if (tty) {
        std::fprintf(stderr, "\r%s   ", line.c_str());
      } else if ((step + 1) % 10 == 0 || step == first_step || step + 1 == steps || check_eager) {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
  }
  energy.EndWindow();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double tokens_per_s = (steps - first_step) * static_cast<double>(env.world_size) * local * seq / seconds;
  if (rank == 0 && tty) std::fprintf(stderr, "\n");

  // The losses and final parameters as magi-tensors-v1, for `magi compare` (a collective).
  if (!absl::GetFlag(FLAGS_dump_dir).empty()) {
    absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> final_weights = (*trainer)->GatherFullParameters();
    if (!final_weights.ok()) return Fail(rank, final_weights.status().message());
    if (rank == 0) {
      const std::string dir = absl::GetFlag(FLAGS_dump_dir);
      std::error_code error;
      std::filesystem::create_directories(dir, error);
      if (error) return Fail(rank, absl::StrCat("cannot create ", dir, ": ", error.message()));
      at::Tensor losses = torch::tensor(step_losses, torch::kDouble);
      for (absl::Status written : {magi::WriteTensorFile(dir + "/losses", {{"losses", losses}}),
                                   magi::WriteTensorFile(dir + "/final_weights", *final_weights)}) {
        if (!written.ok()) return Fail(rank, written.message());
      }
    }
  }

  // The last step, committed: every rank's shards, moments and state, then the manifest.
  std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  if (absl::GetFlag(FLAGS_checkpoint)) {
    absl::Status saved = save();
    if (!saved.ok()) return Fail(rank, saved.message());
  }
  if (rank == 0) {
    std::error_code dir_error;  // with --checkpoint=false nothing above created it
    std::filesystem::create_directories(out_dir, dir_error);
    if (dir_error) return Fail(rank, absl::StrCat("cannot create ", out_dir, ": ", dir_error.message()));
    std::string losses_json;
    for (const auto& [step, loss] : curve) absl::StrAppendFormat(&losses_json, "%s%.8f", losses_json.empty() ? "" : ", ", loss);
    std::string each_step_json;
    for (double seconds : timed_step_seconds) {
      absl::StrAppendFormat(&each_step_json, "%s%.6f", each_step_json.empty() ? "" : ", ", seconds);
    }
    std::string csv = "step,loss\n";
    for (const auto& [step, loss] : curve) absl::StrAppendFormat(&csv, "%d,%.6f\n", step, loss);
    const std::string energy_json = energy.SummaryJson();
    // What the allocator's peak holds that no plan does: PyTorch's GEMM workspaces on CUDA,
    // as predicted before the first step and as held now. They are kept from their first GEMM
    // on, so what is held now was held at the peak, but for any that --check_eager's
    // reference made after it (its backward's thread, when capture ran on meta). -1: not known.
    const int64_t library_bytes_predicted = (*trainer)->predicted_library_device_bytes();
    const int64_t library_bytes = (*trainer)->library_device_bytes();
    std::string summary = absl::StrFormat(
        "{\"initial_loss\": %.6f, \"final_loss\": %.6f, \"steps\": %d, \"world_size\": %d, \"tokens_per_s\": %.1f, "
        "\"peak_memory_bytes\": %d, \"predicted_peak_memory_bytes\": %d, \"step_seconds\": %.6f, "
        "\"predicted_step_seconds\": %.6f, \"budget_bytes\": %d, \"pipeline\": \"%s\", \"backend\": \"%s\", "
        "\"model\": \"%s\", \"dtype\": \"%s\", \"tokens_per_step\": %d, \"timed_steps\": %d, "
        "\"host_seconds_per_step\": %.6f, \"allocator_peak_bytes\": %d, \"compile_seconds\": %.3f, "
        "\"partitions\": %d, \"deterministic\": %s, \"plan_hash\": \"%s\", \"calibration\": \"%s\", "
        "\"calibrated_kernels_measured\": %d, \"calibrated_kernels_cached\": %d, "
        "\"calibrated_kernels_from_steps\": %d, \"calibrated_kernels_pinned\": %d, \"calibration_table\": \"%s\", "
        "\"calibration_table_hash\": \"%s\", \"calibration_planned_hash\": \"%s\", \"timed_step_seconds\": [%s], %s, "
        "\"predicted_library_device_bytes\": %d, \"library_device_bytes\": %d, "
        "\"eager_max_relative_loss_difference\": %s, \"global_batch\": %d, \"resumed_from_step\": %d, "
        "\"resumed_world_size\": %d, \"resumed_global_batch\": %d, \"losses\": [%s]}\n",
        initial_loss, final_loss, steps, env.world_size, tokens_per_s, peak_bytes, predicted.peak_bytes,
        timed_steps > 0 ? step_seconds_sum / timed_steps : 0.0, predicted.step_seconds,
        optimization.memory_budget_bytes, (*trainer)->applied_pipeline(), absl::GetFlag(FLAGS_backend), model_flag,
        dtype_flag, static_cast<int64_t>(env.world_size) * local * seq, timed_steps,
        timed_steps > 0 ? host_seconds_sum / timed_steps : 0.0, allocator_peak_bytes, compile_seconds,
        static_cast<int>((*trainer)->partitions().size()), deterministic ? "true" : "false", (*trainer)->plan_hash(),
        optimization.calibration, (*trainer)->calibration_stats().measured, (*trainer)->calibration_stats().from_cache,
        (*trainer)->calibration_stats().from_steps, (*trainer)->calibration_stats().from_pinned,
        (*trainer)->calibration_stats().table_path,
        (*trainer)->calibration_stats().table_hash, (*trainer)->calibration_stats().planned_hash, each_step_json,
        energy_json, library_bytes_predicted,
        library_bytes,
        !check_eager                    ? std::string("null")
        : std::isfinite(worst_relative) ? absl::StrFormat("%.3e", worst_relative)
                                        : absl::StrFormat("\"%f\"", worst_relative),  // JSON has no NaN: "nan", "inf"
        global_batch, absl::GetFlag(FLAGS_resume) ? first_step : -1, resumed_world_size, resumed_global_batch,
        losses_json);
    for (const auto& [path, contents] : std::vector<std::pair<std::string, std::string>>{
             {out_dir + "/loss.csv", csv}, {out_dir + "/loss.svg", Svg(curve)}, {out_dir + "/summary.json", summary}}) {
      absl::Status status = magi::WriteFileAtomically(path, contents);
      if (!status.ok()) return Fail(rank, status.message());
    }
    if (!absl::GetFlag(FLAGS_summary_json).empty()) {
      absl::Status status = magi::WriteFileAtomically(absl::GetFlag(FLAGS_summary_json), summary);
      if (!status.ok()) return Fail(rank, status.message());
    }
    std::fprintf(stderr,
                 "loss %.4f -> %.4f in %d steps (%.1f s, %.0f tok/s); wrote %s/{loss.csv,loss.svg,summary.json,"
                 "checkpoint/}\n",
                 initial_loss, final_loss, steps, seconds, tokens_per_s, out_dir.c_str());
    if (check_eager) std::fprintf(stderr, "largest relative loss difference to eager: %.2e\n", worst_relative);
    if (energy.measured()) std::fprintf(stderr, "GPU energy over the timed steps: {%s}\n", energy_json.c_str());
    if (std::string note = (*trainer)->FinishStepCalibration(); !note.empty()) {
      std::fprintf(stderr, "magi: %s\n", note.c_str());
    }
    std::fprintf(stderr, "step graph: %.1f ms measured (predicted %.1f), peak %.3f MB measured (predicted %.3f%s%s)\n",
                 timed_steps > 0 ? step_seconds_sum / timed_steps * 1e3 : 0.0, predicted.step_seconds * 1e3,
                 peak_bytes / 1e6, predicted.peak_bytes / 1e6,
                 library_bytes_predicted > 0 || library_bytes > 0
                     ? absl::StrFormat("; PyTorch's GEMM workspaces hold %.3f more, predicted %.3f: %.3f",
                                       library_bytes / 1e6, library_bytes_predicted / 1e6,
                                       (predicted.peak_bytes + library_bytes_predicted) / 1e6)
                           .c_str()
                     : "",
                 optimization.memory_budget_bytes > 0
                     ? absl::StrFormat(", budget %.3f", optimization.memory_budget_bytes / 1e6).c_str()
                     : "");
    if (calibrate) {
      absl::Status saved_table = calibration.Save(absl::GetFlag(FLAGS_calibration_out));
      if (!saved_table.ok()) return Fail(rank, saved_table.message());
      std::fprintf(stderr, "wrote %zu measured op times to %s\n", calibration.size(),
                   absl::GetFlag(FLAGS_calibration_out).c_str());
    }
  }
  return 0;
}

}  // namespace

namespace {

// The numeric flags' ranges, checked once before any process starts. absl parses "nan" and
// "inf" into double flags, and NaN passes every `x < 0` check: --budget_gb=nan would reach
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
      {"budget_gb", absl::GetFlag(FLAGS_budget_gb), true},
  };
  for (const DoubleFlag& flag : doubles) {
    if (!std::isfinite(flag.value) || flag.value < 0 || (!flag.zero_allowed && flag.value == 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", flag.value, ": expected a ",
                                                     flag.zero_allowed ? "non-negative" : "positive",
                                                     ", finite number"));
    }
  }
  if (!magi::BytesFromDouble(absl::GetFlag(FLAGS_budget_gb) * 1e9)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget_gb=", absl::GetFlag(FLAGS_budget_gb), ": more bytes than an int64 holds"));
  }
  struct IntFlag {
    const char* name;
    int value;
    int min;
  };
  const IntFlag ints[] = {
      {"world_size", absl::GetFlag(FLAGS_world_size), 1},   {"steps", absl::GetFlag(FLAGS_steps), 1},
      {"batch_size", absl::GetFlag(FLAGS_batch_size), 0},   {"seq_len", absl::GetFlag(FLAGS_seq_len), 0},
      {"untimed_steps", absl::GetFlag(FLAGS_untimed_steps), 0}, {"warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0},
      {"grad_accum", absl::GetFlag(FLAGS_grad_accum), 1},   {"timeout_s", absl::GetFlag(FLAGS_timeout_s), 1},
      {"partition_min_nodes", absl::GetFlag(FLAGS_partition_min_nodes), 1},
      {"partition_max_nodes", absl::GetFlag(FLAGS_partition_max_nodes), 0},
  };
  for (const IntFlag& flag : ints) {
    if (flag.value < flag.min) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", flag.value, ": must be >= ", flag.min));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = magi::ParseExampleFlags(
      argc, argv,
      "Trains the Llama-style model with FSDP on the Shakespeare sonnets, on local processes (or as a worker of "
      "torchrun / srun).\n  tools/bazel run //examples:train -- [--world_size=2] [--steps=N] [--model=tiny|small|1b] ...",
      "examples/train.cc");
  if (absl::Status flags = ValidateNumericFlags(); !flags.ok()) return Fail(0, flags.message());
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(absl::GetFlag(FLAGS_world_size), argc, argv)) {
    return *code;
  }
  return Train(*env, argv[0]);
}
