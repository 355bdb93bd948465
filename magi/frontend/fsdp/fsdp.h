// FSDP2-style API on top of whole-step capture: FullyShard marks modules, and
// FsdpTrainer compiles ONE graph for the whole training step of the rank (all-gathers,
// forward, loss, backward, reduce-scatters and AdamW on the local shards).
//
//   magi::DeviceMesh mesh = *magi::DeviceMesh::Create({world_size}, {"dp"}, rank);
//   for (auto& layer : model->layers) magi::FullyShard(*layer, mesh);
//   magi::FullyShard(*model, mesh);                        // the root takes the rest
//   auto trainer = magi::FsdpTrainer::Create(*model, loss_fn, example_local_batch, communicator, adamw);
//   double loss = *(*trainer)->Step(local_batch);
//
// Semantics follow FSDP2: each FullyShard call is one communication group; parameters
// are sharded on dim 0 across the mesh (uneven sizes padded); reshard_after_forward
// frees the gathered parameters after forward and gathers them again in backward;
// mixed precision gathers and computes in param_dtype and reduces in reduce_dtype,
// with fp32 master shards and optimizer state. Collectives of every group sit in the
// one graph (no per-layer graph breaks), so passes can move them across layers.
#ifndef MAGI_FRONTEND_FSDP_FSDP_H_
#define MAGI_FRONTEND_FSDP_FSDP_H_

#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/cost/simulator.h"
#include "magi/frontend/capture/capture.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"
#include "magi/runtime/communicator.h"
#include "magi/runtime/torch_executable.h"

namespace magi {

// Ranks arranged in a grid with named axes. 1-D today; the shape/axis form is what
// 2-D HSDP meshes (replicate x shard) will use.
class DeviceMesh {
 public:
  static absl::StatusOr<DeviceMesh> Create(std::vector<int64_t> shape, std::vector<std::string> axis_names, int rank);
  int64_t size() const;  // all ranks
  int64_t axis_size(size_t axis) const { return shape_.at(axis); }
  const std::string& axis_name(size_t axis) const { return axis_names_.at(axis); }
  size_t num_axes() const { return shape_.size(); }
  int rank() const { return rank_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  int rank_ = 0;
};

struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype;   // gathers and compute (the module must be built in it)
  std::optional<DType> reduce_dtype;  // gradient reduce-scatter
};

struct FullyShardOptions {
  bool reshard_after_forward = true;
  MixedPrecisionPolicy mixed_precision;
};

// Marks `module` (and the parameters of its subtree not claimed by a nested
// FullyShard) as one FSDP group. Call on submodules first, then on the root.
void FullyShard(torch::nn::Module& module, const DeviceMesh& mesh, const FullyShardOptions& options = {});

// The groups FullyShard defined under `root`, innermost first, as an IR-level plan.
absl::StatusOr<FsdpPlan> PlanFromFullyShard(torch::nn::Module& root);

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// How the sharded step graph is optimized before it is compiled.
struct StepOptimization {
  // A pass pipeline run after sharding, e.g. "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}".
  std::string passes;
  // > 0: the strategy search picks the pipeline that fits this many bytes per rank
  // (then `passes` must be empty). Every rank searches its own (identical) graph and
  // finds the same plan.
  int64_t memory_budget_bytes = 0;
  std::string device_profile = "cpu";  // cost model for the search and the prediction
  std::string calibration_csv;         // measured op times (CalibrationTable) to use, if any
};

class FsdpTrainer {
 public:
  // Captures one step of `loss_fn` on `example_local_batch` (the shapes every step will
  // have), shards it with the FullyShard plan, compiles it with `backend` and takes this
  // rank's shards of the module's current parameters.
  static absl::StatusOr<std::unique_ptr<FsdpTrainer>> Create(
      torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
      std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options = {},
      const std::string& backend = "interpreter", const StepOptimization& optimization = {});

  // One optimizer step on this rank's batch; returns this rank's loss.
  absl::StatusOr<double> Step(const std::vector<at::Tensor>& local_batch);

  // Every parameter, unsharded (all ranks take part: it is a collective).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParameters();

  const Module& module() const { return *captured_.module; }
  const Graph& graph() const { return *captured_.graph(); }
  int64_t steps_taken() const { return step_; }
  const RunStats& last_run_stats() const { return executable_->last_run_stats(); }
  // Records per-node times in last_run_stats() from the next step on (for calibration).
  void set_profile_nodes(bool on) { executable_->set_profile_nodes(on); }

  // The pass pipeline applied after sharding ("" if none), the strategy search's table
  // when it chose it, and the cost model's prediction for the compiled graph.
  const std::string& applied_pipeline() const { return applied_pipeline_; }
  const std::string& strategy_report() const { return strategy_report_; }
  const SimulationResult& prediction() const { return prediction_; }

  // The rank's state by input name ("<param>.shard", ".exp_avg", ".exp_avg_sq").
  const std::map<std::string, at::Tensor>& state() const { return state_; }

  // Writes this rank's shards, optimizer moments, step count and the default CPU
  // generator's state to `path` (a LibTorch archive), atomically: a temporary file
  // renamed over `path`.
  absl::Status SaveCheckpoint(const std::string& path) const;
  // Restores what SaveCheckpoint wrote (the generator state too); names and shapes must match this trainer's
  // (same model, world size and rank), else InvalidArgument naming the first mismatch.
  absl::Status LoadCheckpoint(const std::string& path);

 private:
  FsdpTrainer() = default;
  absl::Status OptimizeStep(const StepOptimization& optimization);

  torch::nn::Module* root_ = nullptr;
  CapturedGraph captured_;
  FsdpPlan plan_;
  AdamWOptions adamw_;
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<TorchExecutable> executable_;
  std::map<std::string, at::Tensor> state_;  // "<p>.shard", "<p>.exp_avg", "<p>.exp_avg_sq"
  std::map<std::string, std::vector<int64_t>> full_shapes_;
  int64_t step_ = 0;
  std::string applied_pipeline_;
  std::string strategy_report_;
  SimulationResult prediction_;
};

// Forward-only FSDP: one graph with the all-gathers and the forward of `forward_fn`,
// run on this rank's shards (taken from the module, or from a training checkpoint).
class FsdpInference {
 public:
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const std::string& backend = "interpreter");
  // Replaces the shards with those of a FsdpTrainer checkpoint (same world size and rank).
  absl::Status LoadShardsFromCheckpoint(const std::string& path);
  // Runs the forward on `inputs` (the example's shapes); returns its outputs.
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);
  const Graph& graph() const { return *captured_.graph(); }

 private:
  FsdpInference() = default;
  torch::nn::Module* root_ = nullptr;
  CapturedGraph captured_;
  std::unique_ptr<TorchExecutable> executable_;
  std::map<std::string, at::Tensor> shards_;  // "<param>.shard"
};

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_FSDP_H_
