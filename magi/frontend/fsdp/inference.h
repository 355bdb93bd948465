// FsdpInference: forward-only FSDP over the compile driver. One graph holds the
// all-gathers and the forward of `forward_fn`, run on this rank's shards (taken from the
// module, or from a FsdpTrainer checkpoint).
//
//   auto inference = magi::FsdpInference::Create(*model, forward, {tokens}, communicator);
//   std::vector<at::Tensor> logits = *(*inference)->Run({tokens});
//
// Deterministic mode (InferenceOptions::compile.deterministic, docs/deterministic.md) adds batch
// invariance: the forward is captured for ONE sequence and unrolled to the batch of the
// example inputs (the batch-invariant pass), so each sequence's outputs are bitwise those
// of a run holding it alone, whatever the batch size and the other sequences. Every
// input must then have the batch on dim 0, and so must every output.
//
// Unrolling costs the batched kernels: B one-sequence copies of every op, so a decode
// step reads every weight B times. BatchInvariance::kFixedBatch keeps them: the forward
// is compiled batched for the example's batch B, and the CALLER makes every run that
// shape (fewer sequences padded to B rows). Every kernel then sees one shape whatever the
// number of real sequences, so it picks one algorithm, split and reduction order; what
// the mode relies on is row-position invariance (row b of a [B, ...] op computes what
// row 0 would for the same data), which holds for kernels that do not reduce across
// rows and treat every row alike: tools/deterministic_gpu.sh checks it bitwise on the
// GPU for the decode step (M = B rows: one GEMM tile) and for a prefill of B x window
// rows, whose GEMMs span many tiles (a kernel that split tiles differently, e.g. stream-K,
// would break it: examples:generate --unrolled_prefill keeps such a prefill unrolled).
//
// Donation (InferenceOptions::donated_inputs; GraphOutput::aliases in the IR): a forward
// that returns a new version of one of its inputs (a KV cache) can be told that output
// i reuses data input j; RunDonating then takes the inputs by value, and the backend
// writes the output over the input where the op allows (aten::scatter.src of the cache
// update, in place as aten::scatter_.src) and frees the rest after its last read. The
// memory plan (PlannedMemory) counts the donated cache once.
//
//   options.donated_inputs = {{1, 2}, {2, 3}};  // output.1 over input.2, output.2 over input.3
//   std::vector<at::Tensor> out = *(*inference)->RunDonating({tokens, positions, std::move(k), std::move(v)});
//
// Weight preparation (InferenceOptions::weight_preparation, on by default): the compile
// concatenates linears that read one activation (q/k/v, gate/up: concat-matmuls,
// magi/passes/concat_matmuls.h) and moves what depends only on the weights (the
// concatenation of their shards) into a graph of its own (CompiledStep::prep_executable),
// which runs at Create, after LoadShardsFromCheckpoint and after ShareWeightsWith; the step
// reads its outputs as inputs ("<first part>.shard.concat"), so a decode step launches one
// GEMM per group and reads each weight once. To keep one copy of the weights, each shard a
// prepared tensor concatenates whole along dim 0 is then held as a view (narrow on dim 0)
// of it: the shards keep their names and shapes, so checkpoint loading and ShareWeightsWith
// work on them as before. ShareWeightsWith takes the other forward's prepared tensors
// where both prepare them alike (a prefill and a decode graph of one model), else prepares
// its own from the shared shards (a copy of those weights).
#ifndef MAGI_FRONTEND_FSDP_INFERENCE_H_
#define MAGI_FRONTEND_FSDP_INFERENCE_H_

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/analysis/memory_plan.h"
#include "magi/comm/communicator.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/training/step_inputs.h"

namespace magi {

// How deterministic inference makes each sequence's result independent of the batch.
enum class BatchInvariance {
  kUnrolled,    // one-sequence copies of every op (any device; the default)
  kFixedBatch,  // batched at the example's fixed batch; the caller pads (see above)
};

struct InferenceOptions {
  // How the forward is compiled: the options the trainers compile with (the primary
  // backend spec, e.g. "nccl_stream{cuda_graph=true}"; a pass pipeline or a memory
  // budget; partition backends such as inductor; the cost model's profile; deterministic
  // mode; the expected plan hash). The fields FsdpInference sets itself are refused
  // (InvalidArgument naming the field) when given: `sharding` (the module's FullyShard plan,
  // without the optimizer), `batch_invariant_sequences` (from `deterministic` and
  // batch_invariance below), `optimization.weight_preparation` (weight_preparation below)
  // and the cost model's `calibration_csv` and `calibrator` (calibration below).
  // Deterministic mode (see above) needs magi::EnableDeterministicMode() called first; the
  // ranks check they compiled one plan.
  CompileOptions compile;
  // The cost model's measured times (step_calibration.h): "none" (the default: a forward
  // without a memory budget plans nothing from them), "auto" (measured and cached), or a
  // CalibrationTable CSV.
  std::string calibration = "none";
  // Only read when compile.deterministic.
  BatchInvariance batch_invariance = BatchInvariance::kUnrolled;
  // {i, j}: the forward function's output i reuses the storage of its input j (same
  // dtype and shape), which a caller of RunDonating gives up. Run still writes nothing.
  std::vector<std::pair<int, int>> donated_inputs;
  // Weight preparation (see above); compile.optimization.weight_preparation must stay unset.
  // Off: every linear is its own matmul on its own gathered weight. Not applied in
  // deterministic mode with BatchInvariance::kUnrolled: the unrolled sequences share each
  // gathered weight, which concat-matmuls does not concatenate, while a one-sequence graph
  // would be concatenated, and batch invariance needs both to compute alike.
  bool weight_preparation = true;
};

class FsdpInference {
 public:
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const InferenceOptions& options);
  static absl::StatusOr<std::unique_ptr<FsdpInference>> Create(torch::nn::Module& root,
                                                               const ForwardFunction& forward_fn,
                                                               const std::vector<at::Tensor>& example_inputs,
                                                               std::shared_ptr<Communicator> communicator,
                                                               const std::string& backend = "interpreter") {
    InferenceOptions options;
    options.compile.backend = backend;
    return Create(root, forward_fn, example_inputs, std::move(communicator), options);
  }
  // Collective: replaces the shards (and buffers) with those of the newest committed step
  // of a FsdpTrainer checkpoint under `root`, of any world size (resharded on load);
  // optimizer state in it is not read. It removes nothing there: a trainer may be saving
  // its next step meanwhile.
  absl::Status LoadShardsFromCheckpoint(const std::string& root);
  // Runs on `other`'s shards and buffers from now on (the same tensors, not copies), so
  // two forwards of one model (a prefill graph and a decode graph) hold one copy of the
  // weights. InvalidArgument naming the first shard or buffer whose name or shape differs.
  absl::Status ShareWeightsWith(const FsdpInference& other);
  // Where this rank's shard of a parameter is the whole parameter (world 1): the weights
  // the graph runs on as parameters, by the module's parameter name, views of this
  // object's tensors. Empty at world > 1.
  std::map<std::string, at::Tensor> WholeParameters() const;
  // Runs the forward on `inputs` (the example's shapes); returns its outputs (the forward
  // function's, in order; buffers it updates are kept for the next run).
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);
  // The same with the inputs handed over: those named in donated_inputs are written in
  // place or freed after their last read, so the caller must not read them afterwards
  // (it uses the outputs that replace them). Without donated_inputs it is Run.
  absl::StatusOr<std::vector<at::Tensor>> RunDonating(std::vector<at::Tensor> inputs);
  // The memory plan of one run on this rank (magi/analysis/memory_plan.h, in the
  // interpreter's accounting: its peak_bytes, live_after each node) with every input held to the end by its owner (the
  // shards and buffers by this object, the data by the caller) except the donated ones:
  // as compiled (donated: true), or with the graph's donation removed (donated: false:
  // a caller of Run keeps the old cache while the graph makes the new one), which shows
  // what donation saves.
  absl::StatusOr<MemoryPlan> PlannedMemory(bool donated = true) const;
  const Graph& graph() const { return compiled_.graph(); }
  const Module& module() const { return compiled_.module(); }
  // The compiled partitions the graph calls, by callee graph name.
  const std::map<std::string, std::shared_ptr<Executable>>& partition_executables() const {
    return compiled_.partition_executables;
  }
  // The compiled plan's fingerprint (magi/compiler/plan_hash.h).
  const std::string& plan_hash() const { return compiled_.plan_hash; }
  // The weight preparation graph of module() (see above), or null when there is none.
  const Graph* prep_graph() const;
  // Its outputs as last computed, by name (the step's inputs of those names).
  const std::map<std::string, at::Tensor>& prepared_weights() const { return prepared_; }

 private:
  FsdpInference() = default;
  absl::StatusOr<std::vector<at::Tensor>> RunImpl(std::vector<at::Tensor> inputs, bool donate);
  // Runs the weight preparation on the current shards and buffers into prepared_, then
  // makes the shards it concatenates whole views of the result; nothing without one.
  absl::Status PrepareWeights();
  std::vector<std::pair<std::string, at::Tensor>> constants_;
  CompiledStep compiled_;
  TorchExecutable* executable_ = nullptr;
  std::map<std::string, at::Tensor> shards_;  // "<param>.shard"
  std::map<std::string, at::Tensor> buffers_;  // the module buffers the graph reads
  std::map<std::string, std::vector<int64_t>> full_shapes_;  // of each shard, by shard name
  TorchExecutable* prep_executable_ = nullptr;  // compiled_.prep_executable, or null
  std::map<std::string, at::Tensor> prepared_;  // the preparation's outputs, by name
  std::map<std::string, at::Tensor*> prepared_inputs_;  // into prepared_, for StepBindings
  std::shared_ptr<Communicator> communicator_;
  // The graph's inputs bound to the entries above (StepBindings); reset when the maps'
  // entries are replaced.
  std::optional<StepBindings> bindings_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_INFERENCE_H_
