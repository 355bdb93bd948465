#include "magi/frontend/fsdp/inference.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/ir/graph_utils.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fsdp/checkpoint.h"
#include "magi/frontend/fsdp/plan_check.h"
#include "magi/frontend/fsdp/step_inputs.h"
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
  CompileOptions options;
  options.sharding = plan;
  options.backend = inference_options.backend;
  options.deterministic = inference_options.deterministic;
  options.expected_plan_hash = inference_options.expected_plan_hash;
  std::vector<at::Tensor> capture_inputs = example_inputs;
  if (inference_options.deterministic) {
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
  inference->communicator_ = communicator;
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters()) params[item.key()] = item.value();
  for (const FsdpGroupPlan& group : plan.groups) {
    for (const std::string& name : group.params) {
      inference->shards_[name + ".shard"] = ShardOf(params.at(name), plan.world_size, communicator->rank());
      inference->full_shapes_[name + ".shard"] = params.at(name).sizes().vec();
    }
  }
  if (inference_options.deterministic && !inference->shards_.empty()) {
    MAGI_RETURN_IF_ERROR(CheckRanksAgreeOnPlan(*communicator, inference->plan_hash(),
                                               inference->shards_.begin()->second.device()));
  }
  return inference;
}

absl::Status FsdpInference::LoadShardsFromCheckpoint(const std::string& root) {
  RankState like;
  like.sharded = shards_;
  like.full_shapes = full_shapes_;
  for (const auto& [name, tensor] : buffers_) like.per_rank["buffer." + name] = tensor;
  const at::Device device = shards_.empty() ? at::Device(at::kCPU) : shards_.begin()->second.device();
  MAGI_ASSIGN_OR_RETURN(RankState loaded, LoadCommittedCheckpoint(root, like, /*config=*/std::nullopt, *communicator_,
                                                                  device, CheckpointUse::kReadOnly));
  shards_ = std::move(loaded.sharded);
  for (auto& [name, tensor] : buffers_) tensor = loaded.per_rank.at("buffer." + name);
  return absl::OkStatus();
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
  std::map<std::string, at::Tensor> named = shards_;
  AddBuffersAndConstants(buffers_, constants_, named);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> bound, GatherStepInputs(graph(), named, inputs));
  inputs.clear();  // donated: the bound copies are the only references left
  named.clear();
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
