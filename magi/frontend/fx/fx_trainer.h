// FxTrainer: FSDP training of a model imported from PyTorch's FX (a joint graph written by
// tools/fx_export.py --mode joint: parameters, buffers and data as inputs; "loss",
// "<param>.grad" and "<buffer>.updated" as outputs).
//
// It takes the same road as the captured LibTorch step of magi/frontend/fsdp, through the
// training runtime both share (magi/training): the joint graph is sharded by
// magi/compiler with an FsdpPlan whose groups are named by module-path prefixes
// (FullyShard-style: "layers.0", "layers.1", "" for the root), AdamW is appended
// to the graph, the pass pipeline or the strategy search runs, partition backends take
// what they accept, and the primary backend runs ONE graph per step. The trainer holds
// this rank's fp32 master shards, AdamW moments and buffers (BatchNorm running statistics
// are per rank, replaced each step by the graph's "<buffer>.updated" outputs, as DDP/FSDP
// without SyncBatchNorm do).
//
//   absl::StatusOr<FxImport> imported = ImportFxFile("resnet18_joint.fx.json");
//   FxTrainOptions options;
//   options.shard_groups = {"layer1", "layer2", "layer3", "layer4", ""};
//   auto trainer = FxTrainer::Create(std::move(*imported), communicator, options);
//   double loss = *(*trainer)->Step({images, labels});   // in data_inputs() order
//
// Checkpoints: SaveCheckpoint/LoadCheckpoint, as FsdpTrainer's.
//
// What it does NOT do: mixed precision (the graph's dtypes are the exported ones), random
// ops (a joint graph that draws random numbers is compiled, but its generator is the
// default CPU one of this process, not PyTorch's), or shapes other than the exported ones.
#ifndef MAGI_FRONTEND_FX_FX_TRAINER_H_
#define MAGI_FRONTEND_FX_FX_TRAINER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/torch_executable.h"
#include "magi/comm/communicator.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"
#include "magi/training/checkpoint.h"
#include "magi/training/step_calibration.h"
#include "magi/training/step_options.h"

namespace magi {

// The FSDP plan of `graph` (an imported joint graph): one group per module-path prefix,
// each parameter input (role param) in the group of the longest prefix it lies under
// ("layers.0" holds "layers.0.wq.weight"; "" is the root and holds everything else), in
// the order the prefixes are given, parameters in graph input order. InvalidArgument if a
// prefix is repeated or holds no parameter, or if a parameter is in no group (name the
// root "" to give it the rest).
absl::StatusOr<FsdpPlan> FsdpPlanFromModulePrefixes(const Graph& graph, const std::vector<std::string>& prefixes,
                                                    int64_t world_size, bool reshard_after_forward = true);

struct FxTrainOptions {
  // FullyShard-style groups by module path; the default shards the whole model as one.
  std::vector<std::string> shard_groups = {""};
  bool reshard_after_forward = true;
  AdamWOptions adamw;
  // The learning rate by step, as FsdpTrainer's (TrainingOptions::lr_schedule): the AdamW
  // scalars are step inputs, so a schedule recompiles nothing.
  LrSchedule lr_schedule;
  // The cost model's measured times, as FsdpTrainer's (TrainingOptions::calibration): "auto",
  // "none" or a CalibrationTable CSV.
  std::string calibration = "auto";
  // How the step is compiled: the primary backend, passes or memory budget, partitions,
  // cost profile, deterministic mode, expected plan hash; every field as the compiler takes
  // it, as FsdpTrainer takes them, but those CheckTrainingCompileOptions refuses (sharding
  // comes from shard_groups). Under compile.deterministic the process must have called
  // magi::EnableDeterministicMode() first and the ranks check that they compiled one plan.
  // (FsdpTrainer's split master weights have no counterpart here: the shards are gathered
  // in the exported dtype, so no fp32 master is only cast to bf16.)
  CompileOptions compile;
};

class FxTrainer {
 public:
  // Compiles `imported` (a joint graph with its tensors; taken over) for this rank of
  // `communicator` and takes this rank's shards of the imported parameters.
  static absl::StatusOr<std::unique_ptr<FxTrainer>> Create(FxImport imported,
                                                           std::shared_ptr<Communicator> communicator,
                                                           const FxTrainOptions& options);

  // The names of the batch inputs a step takes, in order ("input.0", ..., "target.0", ...).
  const std::vector<std::string>& data_inputs() const { return data_inputs_; }

  // One optimizer step on this rank's batch (shapes as exported); returns this rank's loss.
  absl::StatusOr<double> Step(const std::vector<at::Tensor>& local_batch);

  // Every parameter, unsharded, in plan order (all ranks take part: it is a collective).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParameters();

  // This rank's buffers (and lifted constants) by input name, as of the last step.
  const std::map<std::string, at::Tensor>& buffers() const { return buffers_; }
  // The rank's optimizer state by input name ("<param>.shard", ".exp_avg", ".exp_avg_sq").
  const std::map<std::string, at::Tensor>& state() const { return state_; }
  const FsdpPlan& plan() const { return plan_; }
  const Graph& graph() const { return compiled_.graph(); }
  const std::string& applied_pipeline() const { return compiled_.optimized.applied_pipeline; }
  // The compiled plan's fingerprint (FsdpTrainer::plan_hash; CompileOptions::expected_plan_hash).
  const std::string& plan_hash() const { return compiled_.plan_hash; }
  // The options the step was compiled with: FxTrainOptions::compile with the trainer's
  // additions (sharding, the calibration setting's cost-model fields).
  const CompileOptions& compile_options() const { return compile_options_; }
  // What calibration by default did, and which cached table (path, hash) the plan was
  // chosen with (AutoCalibration; "" and zeros without it).
  const std::string& calibration_summary() const { return compiled_.optimized.calibration_summary; }
  const CalibrationStats& calibration_stats() const { return compiled_.optimized.calibration_stats; }

  int64_t steps_taken() const { return step_; }
  // The learning rate the next Step() uses (adamw.lr under options.lr_schedule).
  double next_learning_rate() const;
  // Calibration from the steps (FsdpTrainer's): writes the steps recorded since the steps
  // file's last write and returns what was done, "" when nothing was folded into the
  // device's cache (CPU steps only; fewer than 8 steps from the third on). Call it where
  // the note is shown, after the last step (destruction writes them too).
  std::string FinishStepCalibration() { return step_times_ ? step_times_->Finish() : ""; }

  // Collective: this rank's master shards, AdamW moments, buffers, step and CPU generator as
  // one committed checkpoint step under `root`, the format and guarantees of FsdpTrainer's
  // (SaveCommittedCheckpoint: a kill at any moment leaves the last committed step loadable).
  absl::Status SaveCheckpoint(const std::string& root, const CheckpointOptions& options = {});
  // Collective: restores the newest committed step under `root` (resharded if it was written
  // at another world size); `config` must equal the saved one. The next Step() continues
  // bitwise as if the run had not stopped (same batches given).
  absl::Status LoadCheckpoint(const std::string& root, const std::string& config = "");

 private:
  FxTrainer() = default;
  at::Device state_device() const;

  FsdpPlan plan_;
  AdamWOptions adamw_;
  LrSchedule lr_schedule_;
  std::shared_ptr<Communicator> communicator_;
  CompileOptions compile_options_;  // what compiled_ was compiled with
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;  // compiled_.executable, as a TorchExecutable
  std::vector<std::string> data_inputs_;
  std::map<std::string, at::Tensor> buffers_;
  std::map<std::string, at::Tensor> state_;
  std::map<std::string, std::vector<int64_t>> full_shapes_;
  int64_t step_ = 0;
  std::unique_ptr<StepTimeRecorder> step_times_;  // null unless calibrating by default on CPU
};

}  // namespace magi

#endif  // MAGI_FRONTEND_FX_FX_TRAINER_H_
