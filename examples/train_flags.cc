// examples:train's flags (train_flags.h): their definitions, the checks every run passes
// before any process starts, and the options they resolve to.
#include "examples/train_flags.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/compile_flags.h"

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

namespace magi::examples {
namespace {

// The numeric flags' ranges. absl parses "nan" and "inf" into double flags, and NaN passes
// every `x < 0` check: --memory_budget_gb=nan would reach the byte conversion undefined,
// --clip_grad_norm=nan would switch clipping off silently.
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
  return absl::OkStatus();
}

// The model's shape by --model (tiny and small train on the bytes of the text).
absl::StatusOr<models::LlamaConfig> ModelConfig(const std::string& model, int seq) {
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  if (model == "small") {
    config = models::LlamaConfig::Small();
  } else if (model == "1b") {
    config = models::LlamaConfig::Llama1B();
  } else if (model != "tiny") {
    return absl::InvalidArgumentError(absl::StrCat("unknown --model=", model, " (tiny, small or 1b)"));
  }
  if (model != "1b") config.vocab_size = 256;  // bytes of the text
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  return config;
}

}  // namespace

absl::StatusOr<TrainFlags> TrainFlagsFromCommandLine() {
  if (absl::Status numbers = ValidateNumericFlags(); !numbers.ok()) return numbers;
  absl::StatusOr<LrSchedule::Kind> lr_schedule = ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule));
  if (!lr_schedule.ok()) return lr_schedule.status();
  if (absl::Status compile = ValidateCompileFlags(); !compile.ok()) return compile;

  TrainFlags flags;
  flags.device = absl::GetFlag(FLAGS_device);
  if (flags.device != "cpu" && flags.device != "cuda")
    return absl::InvalidArgumentError("--device must be cpu or cuda");
  flags.compile = CompileOptionsFromFlags(flags.device);
  flags.world_size = absl::GetFlag(FLAGS_world_size);
  flags.model = absl::GetFlag(FLAGS_model);
  flags.dtype = absl::GetFlag(FLAGS_dtype);
  flags.random_tokens = flags.model == "1b";
  flags.seq_len = absl::GetFlag(FLAGS_seq_len) > 0 ? absl::GetFlag(FLAGS_seq_len) : (flags.random_tokens ? 2048 : 64);
  flags.batch_size =
      absl::GetFlag(FLAGS_batch_size) > 0 ? absl::GetFlag(FLAGS_batch_size) : (flags.random_tokens ? 4 : 8);
  flags.steps = absl::GetFlag(FLAGS_steps);
  flags.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<models::LlamaConfig> config = ModelConfig(flags.model, flags.seq_len);
  if (!config.ok()) return config.status();
  flags.model_config = *config;
  if (flags.dtype != "f32" && flags.dtype != "bf16") return absl::InvalidArgumentError("--dtype must be f32 or bf16");
  flags.bf16 = flags.dtype == "bf16";

  flags.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  flags.resume = absl::GetFlag(FLAGS_resume);
  flags.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  flags.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (flags.keep_checkpoints < 0) return absl::InvalidArgumentError("--keep_checkpoints must be >= 0 (0 keeps all)");
  if (flags.checkpoint_every < 0) return absl::InvalidArgumentError("--checkpoint_every must be >= 0 (0: at the end)");
  flags.checkpoint_config = absl::StrFormat("model=%s dtype=%s seq_len=%d seed=%d data=%s", flags.model, flags.dtype,
                                            flags.seq_len, flags.seed, flags.random_tokens ? "random" : "text");

  absl::StatusOr<ReshardAfterForwardOption> reshard =
      ReshardAfterForwardOption::Parse(absl::GetFlag(FLAGS_reshard_after_forward));
  if (!reshard.ok()) return absl::InvalidArgumentError(absl::StrCat("--", reshard.status().message()));
  flags.mesh = {flags.device, absl::GetFlag(FLAGS_communicator), absl::GetFlag(FLAGS_mesh)};
  flags.mesh.reshard_after_forward = *reshard;
  flags.mesh.deterministic = flags.compile.deterministic;
  flags.mesh.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  const std::string init = absl::GetFlag(FLAGS_init);
  if (init != "device" && init != "meta") return absl::InvalidArgumentError("--init must be device or meta");
  flags.meta_init = init == "meta";
  const int grad_accum = absl::GetFlag(FLAGS_grad_accum);
  if (flags.batch_size % grad_accum != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grad_accum=", grad_accum, " must divide the ", flags.batch_size, " sequences per rank"));
  }
  flags.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  if (!flags.dump_dir.empty() && flags.meta_init) {
    return absl::InvalidArgumentError("--dump_dir needs --init=device (the weights are written from the module)");
  }
  flags.check_eager = absl::GetFlag(FLAGS_check_eager);
  if (flags.check_eager && flags.resume) {
    return absl::InvalidArgumentError("--check_eager cannot be combined with --resume");
  }

  flags.shard.reshard_after_forward = *reshard;
  flags.shard.cpu_offload = absl::GetFlag(FLAGS_cpu_offload);
  if (flags.bf16) flags.shard.mixed_precision = {DType::kBFloat16, DType::kFloat32};
  flags.adamw.lr = absl::GetFlag(FLAGS_lr);
  flags.training.grad_accum = grad_accum;
  flags.training.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  flags.training.lr_schedule = {*lr_schedule, absl::GetFlag(FLAGS_warmup_steps), flags.steps,
                                absl::GetFlag(FLAGS_min_lr)};
  if (flags.meta_init) flags.training.init_seed = flags.seed;
  flags.training.calibration = CalibrationFromFlags();
  flags.training.split_master_weights = absl::GetFlag(FLAGS_split_master_weights);

  flags.untimed_steps = absl::GetFlag(FLAGS_untimed_steps);
  flags.data = absl::GetFlag(FLAGS_data);
  flags.out_dir = absl::GetFlag(FLAGS_out_dir);
  flags.summary_json = absl::GetFlag(FLAGS_summary_json);
  flags.trace = absl::GetFlag(FLAGS_trace);
  flags.kernel_trace = absl::GetFlag(FLAGS_kernel_trace);
  flags.calibration_out = absl::GetFlag(FLAGS_calibration_out);
  flags.dump_graph = absl::GetFlag(FLAGS_dump_graph);
  return flags;
}

std::string DataPath(const std::string& data, const char* argv0) {
  if (!data.empty()) return data;
  // `bazel run` starts us in the runfiles tree, where the data dependency lives.
  for (std::string candidate : {std::string("examples/data/shakespeare_sonnets.txt"),
                                std::string(argv0) + ".runfiles/magi/examples/data/shakespeare_sonnets.txt"}) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return "examples/data/shakespeare_sonnets.txt";
}

}  // namespace magi::examples
