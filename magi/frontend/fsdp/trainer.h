// FsdpTrainer: an FSDP2-style front end over the compile driver. It captures one step of
// the model's training (forward, loss, backward), has magi/compiler shard it with the
// FullyShard plan, optimize, partition and compile it, and then runs ONE graph per step
// holding this rank's all-gathers, forward, loss, backward, reduce-scatters and AdamW on
// the local shards. It owns the rank's state: fp32 master shards, AdamW moments and the
// module's buffers (updated when the step writes them), so after Create the module may
// be released (ReleaseModuleParameters) or destroyed.
//
//   auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example_local_batch, communicator, adamw);
//   double loss = *(*trainer)->Step(local_batch);
//
// What FSDP2 users expect, as TrainingOptions:
//  - a model built on the meta device (init_seed): captured there, each rank materializing
//    only its shards with the modules' initializers (materialize.h);
//  - gradient accumulation over `grad_accum` micro-batches with one reduce-scatter per step
//    (set_requires_gradient_sync): a second graph accumulates the unsharded gradients of
//    the first N-1 micro-batches, the step graph adds them before its reduce-scatter;
//  - clip_grad_norm_ over the full gradient (the norm is all-reduced across shards);
//  - a learning-rate schedule (warm-up, cosine): the AdamW scalars are graph inputs, so
//    it changes nothing compiled;
//  - FullyShard's reshard_after_forward=K (backward gathers over K ranks: pass the
//    communicators CreateMeshCommunicators makes with post_forward_sizes {K}) and
//    cpu_offload (the state lives on the host, pinned where CUDA is; AdamW runs there).
// The state is donated to each step (GraphOutput::aliases): AdamW updates the shards and
// moments in place and the trainer keeps no second copy while the step runs.
#ifndef MAGI_FRONTEND_FSDP_TRAINER_H_
#define MAGI_FRONTEND_FSDP_TRAINER_H_

#include <torch/nn/module.h>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/communicator.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/checkpoint.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/frontend/fsdp/mesh_communicators.h"
#include "magi/frontend/fsdp/step_calibration.h"
#include "magi/frontend/fsdp/step_inputs.h"

namespace magi {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// How the sharded step graph is optimized and partitioned before it is compiled
// (mapped onto magi/compiler's CompileOptions).
struct StepOptimization {
  // A pass pipeline run after sharding, e.g. "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}".
  std::string passes;
  // > 0: the strategy search picks the pipeline that fits this many bytes per rank
  // (then `passes` must be empty). Every rank searches its own (identical) graph and
  // finds the same plan.
  int64_t memory_budget_bytes = 0;
  std::string device_profile = "cpu";  // cost model for the search and the prediction
  // The cost model's measured times (step_calibration.h): "auto" measures the step's
  // kernels the cache lacks (calibration by default), "none" uses the profile's formulas
  // alone, any other value is a CalibrationTable CSV to use as given.
  std::string calibration = "auto";
  // Partition backends that take the parts of the step they accept (see magi/compiler),
  // and the bounds on a partition's node count (max 0: unbounded).
  std::vector<std::string> partition_backends;
  int partition_min_nodes = 1;
  int partition_max_nodes = 0;
  // Collectives moved out of fusible chains before partitioning (PartitionOptions::align_collectives).
  bool partition_align_collectives = true;
  // Fusible activations recomputed for the backward before partitioning
  // (PartitionOptions::recompute_fusible).
  bool partition_recompute_fusible = true;
  // Deterministic mode (CompileOptions::deterministic, docs/deterministic.md): bitwise-
  // identical steps run after run. The process must have called
  // magi::EnableDeterministicMode() first (the backend checks); the ranks check that
  // they compiled the same plan (plan_hash()) and fail naming those that did not.
  bool deterministic = false;
  // Non-empty: the plan hash the step must compile to (an earlier run's), else Create fails.
  std::string expected_plan_hash;
  // Split fp32 master weights (magi/passes/split_master_weights.h): each parameter shard
  // the step only casts to bf16 and updates is held as its bf16 high half (what the step
  // computes with, so its fp32 -> bf16 casts go) and its low 16 bits; AdamW joins, updates
  // and splits them. The same training as fp32 masters (the bf16 parameters are the casts
  // of the same fp32 values) but for exact ties, moved by one fp32 ulp (1 in 65,536 bit
  // patterns: split_float.h). Checkpoints and GatherFullParameters see the joined fp32
  // masters, so checkpoints are interchangeable with runs without it.
  bool split_master_weights = false;
};

// Sets in `options` everything `optimization` asks for but the calibration (passes,
// budget, split masters, cost profile, partitioning, deterministic mode, expected plan
// hash); SetStepCalibration sets that, since it needs the communicators. Every trainer
// (FsdpTrainer, FxTrainer) maps its StepOptimization through this one function, so no
// trainer leaves a field unread.
void ApplyStepOptimization(const StepOptimization& optimization, CompileOptions& options);

// Learning rate by step (t = 1, 2, ...): linear warm-up lr * t / warmup_steps for
// t <= warmup_steps, then constant, or for kCosine
// min_lr + (lr - min_lr) * (1 + cos(pi * min(1, (t - warmup_steps) / (total_steps - warmup_steps)))) / 2.
struct LrSchedule {
  enum class Kind { kConstant, kCosine };
  Kind kind = Kind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // kCosine: the step where lr reaches min_lr (> warmup_steps)
  double min_lr = 0;
};
double ScheduledLearningRate(const LrSchedule& schedule, double lr, int64_t step);
// "constant" or "cosine"; InvalidArgument otherwise.
absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name);

struct TrainingOptions {
  int grad_accum = 1;         // micro-batches per optimizer step (Step splits its batch on dim 0)
  double clip_grad_norm = 0;  // > 0: clip the global gradient norm to this (clip_grad_norm_)
  LrSchedule lr_schedule;
  // Required when the module is on the meta device: the seed its weights are
  // materialized with (the weights torch::manual_seed(init_seed) + a CPU construction give).
  std::optional<uint64_t> init_seed;
};

class FsdpTrainer {
 public:
  // Not copyable or movable: its step bindings point into its own members.
  FsdpTrainer(const FsdpTrainer&) = delete;
  FsdpTrainer& operator=(const FsdpTrainer&) = delete;

  // Captures one step of `loss_fn` on `example_local_batch` (the shapes every step will
  // have), compiles it with the FullyShard plan on `backend` and takes this rank's
  // shards of the module's current parameters.
  // With gradient accumulation the example is one micro-batch.
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const std::string& backend = "interpreter", const StepOptimization& optimization = {},
      const TrainingOptions& training = {});
  // The same over a mesh's communicators by axis name (CreateMeshCommunicators; a 2-D
  // mesh needs its shard and its replicate axis').
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      const MeshCommunicators& communicators, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const std::string& backend = "interpreter", const StepOptimization& optimization = {},
      const TrainingOptions& training = {});

  // One optimizer step on this rank's batch (grad_accum micro-batches of the example's
  // shape, stacked on dim 0); returns this rank's loss (the mean over its micro-batches).
  // If the step fails the state is as before it.
  absl::StatusOr<double> Step(const std::vector<at::Tensor>& local_batch);

  // Frees the module's own (full, unsharded) parameter tensors: the trainer trains its
  // shards, so after Create the module's copies only cost memory (a full replica per rank;
  // 1.8 GiB on the 953M model in bf16). The trainer owns the buffers (see
  // buffers()). Afterwards the module's parameters are empty tensors: use
  // GatherFullParameters() for their values. Does nothing if the module was destroyed.
  void ReleaseModuleParameters();

  // The learning rate the next Step uses, and the total gradient norm the last Step
  // computed (before clipping; needs clip_grad_norm > 0, else NaN).
  double next_learning_rate() const;
  double last_grad_norm() const { return last_grad_norm_; }
  // Every parameter, unsharded (all ranks take part: it is a collective).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParameters();

  const Module& module() const { return compiled_.module(); }
  const Graph& graph() const { return compiled_.graph(); }
  // The graph of the first grad_accum - 1 micro-batches (null without accumulation).
  const Graph* accumulation_graph() const { return accumulate_ ? &accumulate_->graph() : nullptr; }
  int64_t steps_taken() const { return step_; }
  const RunStats& last_run_stats() const { return executable_->last_run_stats(); }
  // Records per-node times in last_run_stats() from the next step on (for calibration).
  void set_profile_nodes(bool on) {
    profile_nodes_ = on;
    executable_->set_profile_nodes(on);
  }
  // Writes a Chrome/Perfetto timeline of the next step to `path` (backends that can).
  absl::Status TraceNextStep(const std::string& path) { return executable_->TraceNextRun(path); }

  // The pass pipeline applied after sharding ("" if none), the strategy search's table
  // when it chose it, the cost model's prediction for the compiled graph, and the
  // partitions other backends took.
  const std::string& applied_pipeline() const { return compiled_.optimized.applied_pipeline; }
  const std::string& strategy_report() const { return compiled_.optimized.strategy_report; }
  const SimulationResult& prediction() const { return compiled_.prediction; }
  // Device memory that libraries will hold outside the step's values once it has run
  // (PyTorch's GEMM workspaces on CUDA; TorchExecutable::LibraryDeviceBytesHeld), predicted
  // when the trainer was created: what they held then plus what the step's executables'
  // runs add. A runtime that reports the allocator's peak counts it; prediction() does not.
  // 0 on CPU; -1: not known.
  int64_t predicted_library_device_bytes() const { return predicted_library_device_bytes_; }
  // What they hold now (after steps: what they held at the step's peak, since they keep it).
  int64_t library_device_bytes() const { return executable_->LibraryDeviceBytesHeld(); }
  // What calibration by default did for the step ("" unless StepOptimization::calibration is "auto").
  const std::string& calibration_summary() const { return compiled_.optimized.calibration_summary; }
  const CalibrationStats& calibration_stats() const { return compiled_.optimized.calibration_stats; }
  // Calibration from the steps (step_calibration.h, StepTimeRecorder): writes the steps
  // recorded since the steps file's last write and returns what was done, "" when nothing
  // was folded into the device's cache (CPU steps only; fewer than 8 steps from the third
  // on), or a warning. Call it where the note is shown, after the last step (destruction
  // writes them too).
  std::string FinishStepCalibration() { return step_times_ ? step_times_->Finish() : ""; }
  const std::vector<Partition>& partitions() const { return compiled_.partitions; }
  // The compiled plan's fingerprint (magi/compiler/plan_hash.h): two runs that print the
  // same hash ran the same buckets, collective sizes, schedule and backends.
  const std::string& plan_hash() const { return compiled_.plan_hash; }

  // The rank's state by input name ("<param>.shard", ".exp_avg", ".exp_avg_sq"; with
  // split_master_weights "<param>.shard.hi" and ".lo" in place of a split shard), each on
  // the device the step takes it on (the host with cpu_offload).
  const std::map<std::string, at::Tensor>& state() const { return state_; }
  // The state entries held split ("<param>.shard" names; empty without split_master_weights).
  const std::vector<std::string>& split_state() const { return split_state_; }
  // The module's buffers, by name, owned by the trainer from Create on: a
  // step that updates them (BatchNorm's running statistics) returns "<buffer>.updated",
  // which replaces them for the next step. Each rank keeps its own (no SyncBatchNorm).
  // The module's own buffers are not written.
  const std::map<std::string, at::Tensor>& buffers() const { return buffers_; }

  // Collective (every rank calls it): commits this step under `root` as <root>/step-<N>/
  // (checkpoint.h): every rank's shards, AdamW moments, buffers and default CPU generator
  // state, and a manifest written once all ranks' files are on disk. `options.keep_last`
  // prunes older steps; `options.config` describes the run (a resume must give the same).
  // On an HSDP mesh only replica 0's ranks write (the replicas hold the same shards), and
  // the ranks of every replica agree on the commit.
  absl::Status SaveCheckpoint(const std::string& root, const CheckpointOptions& options = {});
  // Collective: restores the newest committed step under `root` (step count, generator
  // state and buffers too), after the ranks have agreed on it and checked its files. The
  // checkpoint may come from another world size: each rank takes its rows of the full
  // tensors. The model must match (InvalidArgument naming the first difference) and
  // `config` the one it was saved with (FailedPrecondition).
  absl::Status LoadCheckpoint(const std::string& root, const std::string& config = "");
  // What a checkpoint of this trainer holds: "<param>.shard", ".exp_avg", ".exp_avg_sq"
  // (sharded), "buffer.<name>" and "magi.rng.cpu" (per rank).
  // (Split masters joined, on the host.) Internal error when a join fails.
  absl::StatusOr<RankState> CheckpointState() const;

 private:
  FsdpTrainer() = default;

  // Runs `graph` on `named` tensors (moved in: donated) and `data`; the outputs by name.
  absl::StatusOr<std::map<std::string, at::Tensor>> RunGraph(TorchExecutable& executable, const Graph& graph,
                                                             std::map<std::string, at::Tensor> named,
                                                             const std::vector<at::Tensor>& data);

  std::weak_ptr<torch::nn::Module> root_;  // for ReleaseModuleParameters only
  std::vector<std::pair<std::string, at::Tensor>> constants_;  // lifted by capture
  std::map<std::string, at::Tensor> buffers_;                  // the module's, owned from Create on
  FsdpPlan plan_;
  AdamWOptions adamw_;
  TrainingOptions training_;
  std::shared_ptr<Communicator> communicator_;  // the shard axis'
  // HSDP: the replicate axis' (null on a 1-D mesh); checkpoints span the whole mesh with it.
  std::shared_ptr<Communicator> replicate_communicator_;
  at::Device compute_device_ = at::Device(at::kCPU);  // the step's and the communicators' device
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;  // compiled_.executable, as a TorchExecutable
  std::optional<CompiledStep> accumulate_;  // grad_accum > 1: the micro-batch graph without reduction
  TorchExecutable* accumulate_executable_ = nullptr;
  double last_grad_norm_ = std::nan("");
  std::map<std::string, at::Tensor> state_;  // "<p>.shard" (or ".shard.hi", ".shard.lo"), "<p>.exp_avg", "<p>.exp_avg_sq"
  std::vector<std::string> split_state_;     // the "<p>.shard" entries held split
  std::map<std::string, std::vector<int64_t>> full_shapes_;
  int64_t step_ = 0;
  int64_t predicted_library_device_bytes_ = 0;
  bool profile_nodes_ = false;  // set_profile_nodes
  std::optional<StepBindings> step_bindings_;  // bound at the first step; reset when the maps are replaced
  at::Tensor adamw_decay_, adamw_step_size_, adamw_bc2_sqrt_;  // step inputs, rewritten in place each step
  std::unique_ptr<StepTimeRecorder> step_times_;  // null unless calibrating by default on CPU
};

// Compiles a captured graph (taken over) with `options` and checks that the result runs
// LibTorch tensors; the FSDP front ends share it.
absl::StatusOr<CompiledStep> CompileCapturedForTorch(CapturedGraph captured, const CompileOptions& options,
                                                     TorchExecutable** executable);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_TRAINER_H_
