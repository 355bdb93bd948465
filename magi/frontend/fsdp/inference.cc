#include "magi/frontend/fsdp/inference.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/ir/graph_utils.h"
#include "magi/base/status_macros.h"
#include "magi/training/checkpoint.h"
#include "magi/training/plan_check.h"
#include "magi/training/step_calibration.h"
#include "magi/training/step_inputs.h"
#include "magi/frontend/fsdp/trainer.h"

namespace magi {
namespace {

// The batch every example input has on dim 0 (batch-invariant inference needs one).
absl::StatusOr<int64_t> BatchOf(const std::vector<at::Tensor>& inputs) {
  if (inputs.empty()) return absl::InvalidArgumentError("batch-invariant inference needs at least one input");
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dim() == 0 || inputs[i].size(0) < 1 || (batch >= 0 && inputs[i].size(0) != batch)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch-invariant inference needs the batch on dim 0 of every input; input ", i, " has shape ",
          c10::str(inputs[i].sizes()), batch >= 0 ? absl::StrCat(" (input 0 has ", batch, " sequences)") : ""));
    }
    batch = inputs[i].size(0);
  }
  return batch;
}

// Sets GraphOutput::aliases of the captured forward: output.i over input.j.
absl::Status MarkDonatedInputs(Graph& graph, const std::vector<std::pair<int, int>>& donated) {
  for (const auto& [output, input] : donated) {
    const std::string output_name = absl::StrCat("output.", output);
    const int index = graph.FindOutput(output_name);
    Value* value = graph.FindValue(absl::StrCat("input.", input));
    if (index < 0 || value == nullptr || !value->is_graph_input()) {
      return absl::InvalidArgumentError(absl::StrCat("donated_inputs {", output, ", ", input, "}: the forward has no ",
                                                     index < 0 ? output_name : absl::StrCat("input.", input)));
    }
    const Value* out = graph.outputs()[index].value;
    if (!(out->type() == value->type())) {
      return absl::InvalidArgumentError(absl::StrCat("donated_inputs {", output, ", ", input, "}: ", output_name, " is ",
                                                     out->type().ToString(), " but input.", input, " is ",
                                                     value->type().ToString()));
    }
    for (const GraphOutput& other : graph.outputs()) {
      if (other.aliases == value) {
        return absl::InvalidArgumentError(
            absl::StrCat("donated_inputs: input.", input, " is donated to two outputs"));
      }
    }
    graph.SetOutputAlias(index, value);
  }
  return absl::OkStatus();
}

// How a preparation graph computes its output `index` from its inputs: op, operand names,
// constants and type; "" when it is not one node on the inputs (then it is not shared).
std::string PreparedRecipe(const Graph& prep, size_t index) {
  const Value* value = prep.outputs()[index].value;
  const Node* node = value->producer();
  if (node == nullptr) return "";
  std::string recipe = absl::StrCat(node->op(), ":", value->type().ToString());
  for (const Value* operand : node->operands()) {
    if (!operand->is_graph_input()) return "";
    absl::StrAppend(&recipe, ",%", operand->name());
  }
  for (const Argument& arg : node->args()) {
    if (!arg.value.is_operand_ref()) absl::StrAppend(&recipe, ",", arg.name, "=", arg.value.ToString());
  }
  return recipe;
}

// The operands of `output` (a preparation graph's output) when it is aten::cat along dim 0
// of inputs of the graph, else empty.
std::vector<const Value*> ConcatenatedInputs(const Value* output) {
  const Node* node = output->producer();
  if (node == nullptr || node->op() != "aten::cat") return {};
  for (const Argument& arg : node->args()) {
    if (arg.value.kind() == AttrKind::kInt && arg.value.as_int() != 0) return {};
  }
  std::vector<const Value*> parts;
  for (const Value* operand : node->operands()) {
    if (!operand->is_graph_input()) return {};
    parts.push_back(operand);
  }
  return parts;
}

}  // namespace

const Graph* FsdpInference::prep_graph() const {
  const std::string& name = compiled_.optimized.prep_graph_name;
  return name.empty() ? nullptr : module().FindGraph(name);
}

absl::Status FsdpInference::PrepareWeights() {
  const Graph* prep = prep_graph();
  if (prep == nullptr) return absl::OkStatus();
  std::vector<at::Tensor> inputs;
  for (const Value* input : prep->inputs()) {
    const std::string& name = input->name();
    at::Tensor tensor;
    for (const auto& [constant_name, constant] : constants_) {
      if (constant_name == name) tensor = constant;
    }
    if (!tensor.defined()) {
      if (auto it = buffers_.find(name); it != buffers_.end()) {
        tensor = it->second;
      } else if (auto it = shards_.find(name); it != shards_.end()) {
        tensor = it->second;
      } else {
        return absl::InternalError(absl::StrCat("the weight preparation @", prep->name(), " reads %", name,
                                                ", which is no shard, buffer or constant"));
      }
    }
    inputs.push_back(std::move(tensor));
  }
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, prep_executable_->Run(inputs));
  if (outputs.size() != prep->outputs().size()) {
    return absl::InternalError(absl::StrCat("the weight preparation gave ", outputs.size(), " outputs, not ",
                                            prep->outputs().size()));
  }
  inputs.clear();
  for (size_t i = 0; i < outputs.size(); ++i) prepared_[prep->outputs()[i].name] = outputs[i];
  // One copy of the weights: a shard concatenated whole becomes its rows of the result.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::vector<const Value*> parts = ConcatenatedInputs(prep->outputs()[i].value);
    int64_t offset = 0;
    for (const Value* part : parts) {
      auto it = shards_.find(part->name());
      if (it == shards_.end()) break;  // a buffer or a constant: not the shards'
      const int64_t rows = it->second.size(0);
      it->second = outputs[i].narrow(0, offset, rows);
      offset += rows;
    }
  }
  if (prepared_inputs_.size() != prepared_.size()) {
    for (auto& [name, tensor] : prepared_) prepared_inputs_[name] = &tensor;
    bindings_.reset();
  }
  return absl::OkStatus();
}

std::map<std::string, at::Tensor> FsdpInference::WholeParameters() const {
  std::map<std::string, at::Tensor> whole;
  if (communicator_ == nullptr || communicator_->size() != 1) return whole;
  constexpr absl::string_view kSuffix = ".shard";
  for (const auto& [name, shard] : shards_) {
    if (!absl::EndsWith(name, kSuffix) || shard.sizes() != at::IntArrayRef(full_shapes_.at(name))) continue;
    whole[name.substr(0, name.size() - kSuffix.size())] = shard;
  }
  return whole;
}

namespace {

// The CompileOptions fields FsdpInference sets itself, refused (InvalidArgument naming the
// field and where the setting goes) rather than overwritten.
absl::Status CheckInferenceCompileOptions(const CompileOptions& compile) {
  auto refused = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("FsdpInference does not take CompileOptions::", field, ": ", why));
  };
  if (compile.sharding) return refused("sharding", "the plan comes from the module's FullyShard calls");
  if (compile.batch_invariant_sequences > 1) {
    return refused("batch_invariant_sequences",
                   "set compile.deterministic (and InferenceOptions::batch_invariance): the batch comes from the "
                   "example");
  }
  if (compile.optimization.weight_preparation) {
    return refused("optimization.weight_preparation", "set InferenceOptions::weight_preparation (on by default)");
  }
  if (!compile.cost_model.calibration_csv.empty()) {
    return refused("cost_model.calibration_csv",
                   absl::StrCat("give the table as InferenceOptions::calibration (\"",
                                compile.cost_model.calibration_csv, "\")"));
  }
  if (compile.cost_model.calibrator != nullptr) {
    return refused("cost_model.calibrator", "set InferenceOptions::calibration = \"auto\"");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FsdpInference>> FsdpInference::Create(torch::nn::Module& root,
                                                                     const ForwardFunction& forward_fn,
                                                                     const std::vector<at::Tensor>& example_inputs,
                                                                     std::shared_ptr<Communicator> communicator,
                                                                     const InferenceOptions& inference_options) {
  auto inference = std::unique_ptr<FsdpInference>(new FsdpInference());
  MAGI_ASSIGN_OR_RETURN(FsdpPlan plan, PlanFromFullyShard(root));
  if (plan.world_size != communicator->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has ", plan.world_size, " ranks but the communicator ", communicator->size()));
  }
  plan.optimizer = false;
  plan.cpu_offload = false;  // offload is about optimizer state: inference keeps its shards on the device
  // No fp32 masters: the shards are held in the parameters' own dtype, so the graph gathers
  // and computes with them as they are (fp32 shards of a bf16 model cost twice the memory
  // and a cast of every weight in every run).
  plan.master_dtype = std::nullopt;
  MAGI_RETURN_IF_ERROR(CheckInferenceCompileOptions(inference_options.compile));
  CompileOptions options = inference_options.compile;
  options.sharding = plan;
  options.optimization.weight_preparation = inference_options.weight_preparation;
  // Every layer's attention turns the same mask into the same additive bias (SDPA's bool-mask
  // conversion, traced once per call): common subexpression elimination keeps one per graph.
  // At world 1 the weights' all-gathers are identities that would cut every layer (each
  // RMSNorm) between two partitions: they go. (Neither is in the training default: a
  // training step's plans and hashes are tabled as they are.)
  if (options.optimization.canonicalize == OptimizationOptions().canonicalize) {
    options.optimization.canonicalize = "elide-single-rank-collectives,elide-copies,slice-grads-to-cat,cse,dce";
  }
  if (options.deterministic && inference_options.batch_invariance == BatchInvariance::kUnrolled) {
    // The unrolled copies share each gathered weight, which concat-matmuls leaves alone,
    // while a one-sequence graph has it concatenated: their bits would differ.
    options.optimization.weight_preparation = false;
  }
  {
    // Calibration runs where the forward will: the parameters' device.
    at::Device device = at::kCPU;
    for (const auto& item : root.named_parameters()) device = item.value().device();
    MAGI_RETURN_IF_ERROR(SetStepCalibration(inference_options.calibration, {{plan.process_group, communicator}}, device,
                                            options.cost_model));
  }
  std::vector<at::Tensor> capture_inputs = example_inputs;
  if (options.deterministic) {
    MAGI_ASSIGN_OR_RETURN(int64_t batch, BatchOf(example_inputs));
    if (inference_options.batch_invariance == BatchInvariance::kUnrolled) {
      // Capture one sequence (row 0), compile it unrolled to the batch.
      for (at::Tensor& input : capture_inputs) input = input.narrow(0, 0, 1).contiguous();
      options.batch_invariant_sequences = batch;
    }
    // kFixedBatch: compiled batched as given; the static shapes make every run this batch.
  }
  MAGI_ASSIGN_OR_RETURN(CapturedGraph captured, CaptureForward(root, forward_fn, capture_inputs));
  MAGI_RETURN_IF_ERROR(MarkDonatedInputs(*captured.graph(), inference_options.donated_inputs));
  inference->constants_ = captured.constants;
  MAGI_ASSIGN_OR_RETURN(inference->compiled_,
                        CompileCapturedForTorch(std::move(captured), options, &inference->executable_));
  MAGI_RETURN_IF_ERROR(inference->executable_->BindCommunicator(plan.process_group, communicator));
  inference->buffers_ = BuffersTheGraphReads(inference->graph(), root);
  if (const Graph* prep = inference->prep_graph()) {
    inference->prep_executable_ = dynamic_cast<TorchExecutable*>(inference->compiled_.prep_executable.get());
    if (inference->prep_executable_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("backend '", options.backend,
                                                        "' compiled no LibTorch executable of @", prep->name()));
    }
    inference->buffers_.merge(BuffersTheGraphReads(*prep, root));
  }
  inference->communicator_ = communicator;
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters()) params[item.key()] = item.value();
  for (const FsdpGroupPlan& group : plan.groups) {
    for (const std::string& name : group.params) {
      const at::Tensor& param = params.at(name);
      inference->shards_[name + ".shard"] = ShardOf(param, plan.world_size, communicator->rank()).to(param.scalar_type());
      inference->full_shapes_[name + ".shard"] = params.at(name).sizes().vec();
    }
  }
  MAGI_RETURN_IF_ERROR(inference->PrepareWeights());
  if (options.deterministic && !inference->shards_.empty()) {
    MAGI_RETURN_IF_ERROR(CheckRanksAgreeOnPlan(*communicator, inference->plan_hash(),
                                               inference->shards_.begin()->second.device()));
  }
  return inference;
}

absl::Status FsdpInference::LoadShardsFromCheckpoint(const std::string& root) {
  // Checkpoints hold fp32 master shards (FsdpTrainer's); they are loaded as such and cast
  // to the dtype the graph computes in.
  RankState like;
  for (const auto& [name, shard] : shards_) like.sharded[name] = shard.to(at::kFloat);
  like.full_shapes = full_shapes_;
  for (const auto& [name, tensor] : buffers_) like.per_rank["buffer." + name] = tensor;
  const at::Device device = shards_.empty() ? at::Device(at::kCPU) : shards_.begin()->second.device();
  MAGI_ASSIGN_OR_RETURN(RankState loaded, LoadCommittedCheckpoint(root, like, /*config=*/std::nullopt, *communicator_,
                                                                  device, CheckpointUse::kReadOnly));
  for (auto& [name, shard] : loaded.sharded) shard = shard.to(shards_.at(name).scalar_type());
  shards_ = std::move(loaded.sharded);
  bindings_.reset();  // they point into the maps' entries
  for (auto& [name, tensor] : buffers_) tensor = loaded.per_rank.at("buffer." + name);
  return PrepareWeights();
}

absl::Status FsdpInference::ShareWeightsWith(const FsdpInference& other) {
  auto check = [](const std::map<std::string, at::Tensor>& mine, const std::map<std::string, at::Tensor>& theirs,
                  const char* what) -> absl::Status {
    for (const auto& [name, tensor] : mine) {
      auto it = theirs.find(name);
      if (it == theirs.end()) {
        return absl::InvalidArgumentError(absl::StrCat("cannot share weights: the other forward has no ", what, " ", name));
      }
      if (it->second.sizes() != tensor.sizes() || it->second.dtype() != tensor.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("cannot share weights: ", what, " ", name, " is ",
                                                       c10::str(tensor.sizes()), " here and ",
                                                       c10::str(it->second.sizes()), " in the other forward"));
      }
    }
    return absl::OkStatus();
  };
  MAGI_RETURN_IF_ERROR(check(shards_, other.shards_, "shard"));
  MAGI_RETURN_IF_ERROR(check(buffers_, other.buffers_, "buffer"));
  for (auto& [name, tensor] : shards_) tensor = other.shards_.at(name);
  for (auto& [name, tensor] : buffers_) tensor = other.buffers_.at(name);
  const Graph* prep = prep_graph();
  if (prep == nullptr) return absl::OkStatus();
  // The other forward's prepared tensors where it prepares the same ones from the same
  // weights (its shards are views of them), else this forward's own.
  const Graph* theirs = other.prep_graph();
  bool same = theirs != nullptr;
  for (size_t i = 0; same && i < prep->outputs().size(); ++i) {
    const std::string& name = prep->outputs()[i].name;
    const int index = theirs->FindOutput(name);
    const std::string recipe = PreparedRecipe(*prep, i);
    same = index >= 0 && !recipe.empty() && recipe == PreparedRecipe(*theirs, index) &&
           other.prepared_.count(name) > 0;
  }
  if (!same) return PrepareWeights();
  for (const GraphOutput& output : prep->outputs()) prepared_[output.name] = other.prepared_.at(output.name);
  if (prepared_inputs_.size() != prepared_.size()) {
    for (auto& [name, tensor] : prepared_) prepared_inputs_[name] = &tensor;
    bindings_.reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> FsdpInference::Run(const std::vector<at::Tensor>& inputs) {
  return RunImpl(inputs, /*donate=*/false);
}

absl::StatusOr<std::vector<at::Tensor>> FsdpInference::RunDonating(std::vector<at::Tensor> inputs) {
  return RunImpl(std::move(inputs), /*donate=*/true);
}

absl::StatusOr<MemoryPlan> FsdpInference::PlannedMemory(bool donated) const {
  // The shards and buffers stay with this object, and a caller of Run keeps its inputs:
  // only donated inputs are the graph's to free or overwrite.
  LivenessOptions held;
  held.inputs_held_by_caller = true;
  if (donated) return PlanMemory(graph(), /*assign_buffers=*/false, held);
  std::unique_ptr<Module> copy = CloneModule(module());
  Graph* graph = copy->FindGraph(compiled_.graph().name());
  for (size_t i = 0; i < graph->outputs().size(); ++i) graph->SetOutputAlias(static_cast<int>(i), nullptr);
  return PlanMemory(*graph, /*assign_buffers=*/false, held);
}

absl::StatusOr<std::vector<at::Tensor>> FsdpInference::RunImpl(std::vector<at::Tensor> inputs, bool donate) {
  // Bound once: a decode step's host work is per input a pointer read, not a name lookup.
  if (!bindings_) {
    // The prepared weights are bound by pointer, as a trainer's step scalars are.
    MAGI_ASSIGN_OR_RETURN(StepBindings bound,
                          StepBindings::Bind(graph(), shards_, buffers_, constants_, prepared_inputs_));
    bindings_ = std::move(bound);
  }
  std::map<std::string, at::Tensor> no_per_step_tensors;
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> bound, bindings_->Gather(inputs, no_per_step_tensors));
  inputs.clear();  // donated: the bound copies are the only references left
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs,
                        donate ? executable_->RunDonating(std::move(bound)) : executable_->Run(bound));
  TakeUpdatedBuffers(graph(), outputs, buffers_);  // a forward in training mode updates statistics
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < graph().outputs().size(); ++i) {
    if (absl::StartsWith(graph().outputs()[i].name, "output.")) results.push_back(outputs[i]);
  }
  return results;
}

}  // namespace magi
