// FsdpTrainer: an FSDP2-style front end over the compile driver. It captures one step of
// the model's training (forward, loss, backward), has magi/compiler shard it with the
// FullyShard plan, optimize, partition and compile it, and then runs ONE graph per step
// holding this rank's all-gathers, forward, loss, backward, reduce-scatters and AdamW on
// the local shards. It owns the rank's state: fp32 master shards and AdamW moments.
//
//   auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example_local_batch, communicator, adamw);
//   double loss = *(*trainer)->Step(local_batch);
#ifndef MAGI_FRONTEND_FSDP_TRAINER_H_
#define MAGI_FRONTEND_FSDP_TRAINER_H_

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/communicator.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/checkpoint.h"
#include "magi/frontend/fsdp/fully_shard.h"

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
  std::string calibration_csv;         // measured op times (CalibrationTable) to use, if any
  // Partition backends that take the parts of the step they accept (see magi/compiler),
  // and the bounds on a partition's node count (max 0: unbounded).
  std::vector<std::string> partition_backends;
  int partition_min_nodes = 1;
  int partition_max_nodes = 0;
};

class FsdpTrainer {
 public:
  // Captures one step of `loss_fn` on `example_local_batch` (the shapes every step will
  // have), compiles it with the FullyShard plan on `backend` and takes this rank's
  // shards of the module's current parameters.
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const std::string& backend = "interpreter", const StepOptimization& optimization = {});

  // One optimizer step on this rank's batch; returns this rank's loss.
  absl::StatusOr<double> Step(const std::vector<at::Tensor>& local_batch);

  // Frees the module's own (full, unsharded) parameter tensors: the trainer trains its
  // shards, so after Create the module's copies only cost memory (a full replica per rank;
  // 1.8 GiB on the 953M model in bf16). Buffers stay (the trainer holds what the step
  // reads; see buffers()). Afterwards the module's parameters are empty tensors: use
  // GatherFullParameters() for their values.
  void ReleaseModuleParameters();

  // Every parameter, unsharded (all ranks take part: it is a collective).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParameters();

  const Module& module() const { return compiled_.module(); }
  const Graph& graph() const { return compiled_.graph(); }
  int64_t steps_taken() const { return step_; }
  const RunStats& last_run_stats() const { return executable_->last_run_stats(); }
  // Records per-node times in last_run_stats() from the next step on (for calibration).
  void set_profile_nodes(bool on) { executable_->set_profile_nodes(on); }
  // Writes a Chrome/Perfetto timeline of the next step to `path` (backends that can).
  absl::Status TraceNextStep(const std::string& path) { return executable_->TraceNextRun(path); }

  // The pass pipeline applied after sharding ("" if none), the strategy search's table
  // when it chose it, the cost model's prediction for the compiled graph, and the
  // partitions other backends took.
  const std::string& applied_pipeline() const { return compiled_.optimized.applied_pipeline; }
  const std::string& strategy_report() const { return compiled_.optimized.strategy_report; }
  const SimulationResult& prediction() const { return compiled_.optimized.prediction; }
  const std::vector<Partition>& partitions() const { return compiled_.partitions; }

  // The rank's state by input name ("<param>.shard", ".exp_avg", ".exp_avg_sq").
  const std::map<std::string, at::Tensor>& state() const { return state_; }
  // The module buffers the step reads, by name, owned by the trainer from Create on: a
  // step that updates them (BatchNorm's running statistics) returns "<buffer>.updated",
  // which replaces them for the next step. Each rank keeps its own (no SyncBatchNorm).
  // The module's own buffers are not written.
  const std::map<std::string, at::Tensor>& buffers() const { return buffers_; }

  // Collective (every rank calls it): commits this step under `root` as <root>/step-<N>/
  // (checkpoint.h): every rank's shards, AdamW moments, buffers and default CPU generator
  // state, and a manifest written once all ranks' files are on disk. `options.keep_last`
  // prunes older steps; `options.config` describes the run (a resume must give the same).
  absl::Status SaveCheckpoint(const std::string& root, const CheckpointOptions& options = {});
  // Collective: restores the newest committed step under `root` (step count, generator
  // state and buffers too), after the ranks have agreed on it and checked its files. The
  // checkpoint may come from another world size: each rank takes its rows of the full
  // tensors. The model must match (InvalidArgument naming the first difference) and
  // `config` the one it was saved with (FailedPrecondition).
  absl::Status LoadCheckpoint(const std::string& root, const std::string& config = "");
  // What a checkpoint of this trainer holds: "<param>.shard", ".exp_avg", ".exp_avg_sq"
  // (sharded), "buffer.<name>" and "magi.rng.cpu" (per rank).
  RankState CheckpointState() const;

 private:
  FsdpTrainer() = default;

  torch::nn::Module* root_ = nullptr;
  std::vector<std::pair<std::string, at::Tensor>> constants_;  // lifted by capture
  FsdpPlan plan_;
  AdamWOptions adamw_;
  std::shared_ptr<Communicator> communicator_;
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;  // compiled_.executable, as a TorchExecutable
  std::map<std::string, at::Tensor> state_;  // "<p>.shard", "<p>.exp_avg", "<p>.exp_avg_sq"
  std::map<std::string, at::Tensor> buffers_;  // what the step reads of the module's buffers
  std::map<std::string, std::vector<int64_t>> full_shapes_;
  int64_t step_ = 0;
};

// Compiles a captured graph (taken over) with `options` and checks that the result runs
// LibTorch tensors; the FSDP front ends share it.
absl::StatusOr<CompiledStep> CompileCapturedForTorch(CapturedGraph captured, const CompileOptions& options,
                                                     TorchExecutable** executable);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_TRAINER_H_
