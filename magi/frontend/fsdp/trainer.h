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
#include "magi/backend/torch_executable.h"
#include "magi/comm/communicator.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/frontend/fsdp/mesh_communicators.h"
#include "magi/training/checkpoint.h"
#include "magi/training/step_calibration.h"
#include "magi/training/step_inputs.h"
#include "magi/training/step_options.h"

namespace magi {

struct TrainingOptions {
  int grad_accum = 1;         // micro-batches per optimizer step (Step splits its batch on dim 0)
  double clip_grad_norm = 0;  // > 0: clip the global gradient norm to this (clip_grad_norm_)
  LrSchedule lr_schedule;
  // Required when the module is on the meta device: the seed its weights are
  // materialized with (the weights torch::manual_seed(init_seed) + a CPU construction give).
  std::optional<uint64_t> init_seed;
  // The cost model's measured times (step_calibration.h): "auto" measures the step's
  // kernels the cache lacks (calibration by default), "none" uses the device profile's
  // formulas alone, any other value is a CalibrationTable CSV used as given. It sets
  // CompileOptions::cost_model's calibration_csv and calibrator (which must be left unset).
  std::string calibration = "auto";
  // Split fp32 master weights (magi/passes/split_master_weights.h): each parameter shard
  // the step only casts to bf16 and updates is held as its bf16 high half (what the step
  // computes with, so its fp32 -> bf16 casts go) and its low 16 bits; AdamW joins, updates
  // and splits them. The same training as fp32 masters (the bf16 parameters are the casts
  // of the same fp32 values) but for exact ties, moved by one fp32 ulp (1 in 65,536 bit
  // patterns: split_float.h). Checkpoints and GatherFullParameters see the joined fp32
  // masters, so checkpoints are interchangeable with runs without it. When no shard
  // qualifies (no bf16 mixed precision) the masters stay fp32 and a note says so.
  bool split_master_weights = false;
};

class FsdpTrainer {
 public:
  // Not copyable or movable: its step bindings point into its own members.
  FsdpTrainer(const FsdpTrainer&) = delete;
  FsdpTrainer& operator=(const FsdpTrainer&) = delete;

  // Captures one step of `loss_fn` on `example_local_batch` (the shapes every step will
  // have), compiles it with the FullyShard plan and `compile` (the primary backend,
  // passes or memory budget, partitions, cost profile, deterministic mode, expected plan
  // hash: every field as the compiler takes it, but those CheckTrainingCompileOptions
  // refuses) and takes this rank's shards of the module's current parameters.
  // With gradient accumulation the example is one micro-batch. Under
  // compile.deterministic the ranks check that they compiled the same plan (plan_hash())
  // and fail naming those that did not; the process must have called
  // magi::EnableDeterministicMode() first (the backend checks).
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const CompileOptions& compile = {}, const TrainingOptions& training = {});
  // The same over a mesh's communicators by axis name (CreateMeshCommunicators; a 2-D
  // mesh needs its shard and its replicate axis').
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      const MeshCommunicators& communicators, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const CompileOptions& compile = {}, const TrainingOptions& training = {});

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
  // What calibration by default did for the step ("" unless TrainingOptions::calibration is "auto").
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
  // The options the step was compiled with: the caller's CompileOptions with the trainer's
  // additions (sharding, split-master-weights, the calibration setting's cost-model fields).
  const CompileOptions& compile_options() const { return compile_options_; }

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
  CompileOptions compile_options_;  // what compiled_ was compiled with
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

// CompileForTorch (magi/training/compile_for_torch.h) of a captured graph (taken over).
absl::StatusOr<CompiledStep> CompileCapturedForTorch(CapturedGraph captured, const CompileOptions& options,
                                                     TorchExecutable** executable);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_TRAINER_H_
