#include "magi/frontend/fx/fx_trainer.h"

#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/training/checkpoint.h"
#include "magi/training/compile_for_torch.h"
#include "magi/training/plan_check.h"
#include "magi/training/step_calibration.h"
#include "magi/training/step_inputs.h"

namespace magi {
namespace {

bool UnderPrefix(const std::string& name, const std::string& prefix) {
  return prefix.empty() || name == prefix || absl::StartsWith(name, prefix + ".");
}

}  // namespace

absl::StatusOr<FsdpPlan> FsdpPlanFromModulePrefixes(const Graph& graph, const std::vector<std::string>& prefixes,
                                                    int64_t world_size, bool reshard_after_forward) {
  FsdpPlan plan;
  plan.world_size = world_size;
  plan.master_dtype = DType::kFloat32;
  std::set<std::string> seen;
  for (const std::string& prefix : prefixes) {
    if (!seen.insert(prefix).second) {
      return absl::InvalidArgumentError(absl::StrCat("FSDP group '", prefix, "' is named twice"));
    }
    FsdpGroupPlan group;
    group.name = prefix;
    group.reshard_after_forward = reshard_after_forward;
    plan.groups.push_back(std::move(group));
  }
  for (const Value* input : graph.inputs()) {
    if (input->role() != InputRole::kParam) continue;
    const std::string& name = input->name();
    int best = -1;
    for (size_t g = 0; g < prefixes.size(); ++g) {
      if (UnderPrefix(name, prefixes[g]) && (best < 0 || prefixes[g].size() > prefixes[best].size())) {
        best = static_cast<int>(g);
      }
    }
    if (best < 0) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " of graph @", graph.name(),
                                                     " is in no FSDP group (name the root \"\" to take the rest)"));
    }
    plan.groups[best].params.push_back(name);
  }
  for (const FsdpGroupPlan& group : plan.groups) {
    if (group.params.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("FSDP group '", group.name, "' holds no parameter of graph @", graph.name()));
    }
  }
  return plan;
}

absl::StatusOr<std::unique_ptr<FxTrainer>> FxTrainer::Create(FxImport imported,
                                                             std::shared_ptr<Communicator> communicator,
                                                             const FxTrainOptions& options) {
  if (imported.kind != "joint") {
    return absl::InvalidArgumentError(absl::StrCat("FX graph @", imported.graph_name, " is a ", imported.kind,
                                                   " graph; training needs a joint one (fx_export.py --mode joint)"));
  }
  const Graph& graph = imported.graph();
  if (graph.FindOutput("loss") != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FX graph @", graph.name(), " has no first output \"loss\""));
  }
  MAGI_RETURN_IF_ERROR(CheckTrainingCompileOptions(options.compile, "FxTrainer"));
  auto trainer = std::unique_ptr<FxTrainer>(new FxTrainer());
  trainer->adamw_ = options.adamw;
  trainer->lr_schedule_ = options.lr_schedule;
  trainer->communicator_ = communicator;
  MAGI_ASSIGN_OR_RETURN(trainer->plan_, FsdpPlanFromModulePrefixes(graph, options.shard_groups, communicator->size(),
                                                                   options.reshard_after_forward));
  trainer->plan_.adamw = {options.adamw.beta1, options.adamw.beta2, options.adamw.eps};

  std::map<std::string, at::Tensor> params;
  for (const Value* input : graph.inputs()) {
    const std::string& name = input->name();
    if (input->role() == InputRole::kData) {
      trainer->data_inputs_.push_back(name);
      continue;
    }
    if (input->role() == InputRole::kRng) continue;
    auto it = imported.tensors.find(name);
    if (it == imported.tensors.end()) {
      return absl::NotFoundError(
          absl::StrCat("the tensors file of @", graph.name(), " has no value for input %", name));
    }
    (input->role() == InputRole::kParam ? params : trainer->buffers_)[name] = it->second;
  }

  CompileOptions compile = options.compile;
  compile.sharding = trainer->plan_;
  at::Device device = params.empty() ? at::Device(at::kCPU) : params.begin()->second.device();
  MAGI_RETURN_IF_ERROR(SetStepCalibration(options.calibration,
                                          {{trainer->plan_.process_group, communicator}}, device, compile.cost_model));
  trainer->step_times_ = StepTimeRecorder::Create(compile.cost_model, device);
  trainer->compile_options_ = compile;
  MAGI_ASSIGN_OR_RETURN(trainer->compiled_, CompileForTorch(std::move(imported.module), imported.graph_name, compile,
                                                            &trainer->executable_));
  MAGI_RETURN_IF_ERROR(trainer->executable_->BindCommunicator(trainer->plan_.process_group, communicator));

  // This rank's rows of every parameter, padded to whole shards; zero moments.
  const int64_t world = trainer->plan_.world_size;
  const int rank = communicator->rank();
  for (const FsdpGroupPlan& group : trainer->plan_.groups) {
    for (const std::string& name : group.params) {
      at::Tensor shard = ShardOf(params.at(name), world, rank);
      trainer->full_shapes_[name] = params.at(name).sizes().vec();
      trainer->state_[name + ".shard"] = shard;
      trainer->state_[name + ".exp_avg"] = at::zeros_like(shard);
      trainer->state_[name + ".exp_avg_sq"] = at::zeros_like(shard);
    }
  }
  if (compile.deterministic && !trainer->state_.empty()) {
    MAGI_RETURN_IF_ERROR(CheckRanksAgreeOnPlan(*communicator, trainer->plan_hash(), device));
  }
  return trainer;
}

absl::StatusOr<double> FxTrainer::Step(const std::vector<at::Tensor>& local_batch) {
  if (local_batch.size() != data_inputs_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a step of @", graph().name(), " takes ", data_inputs_.size(),
                                                   " batch tensors (", absl::StrJoin(data_inputs_, ", "), "), not ",
                                                   local_batch.size()));
  }
  // The AdamW scalars the sharded graph reads (see magi/passes/fsdp/shard_for_fsdp.h),
  // as FsdpTrainer::Step computes them.
  const AdamWOptions& o = adamw_;
  const double t = static_cast<double>(step_ + 1);
  const double lr = next_learning_rate();
  at::TensorOptions scalar = at::TensorOptions().dtype(at::kFloat);
  for (const Value* input : graph().inputs()) {
    if (input->name() == "adamw.decay") scalar = scalar.device(compat::ToTorchDevice(input->type().tensor().device));
  }
  std::map<std::string, at::Tensor> named = state_;
  for (const auto& [name, tensor] : buffers_) named[name] = tensor;
  named["adamw.decay"] = at::scalar_tensor(1.0 - lr * o.weight_decay, scalar);
  named["adamw.step_size"] = at::scalar_tensor(lr / (1.0 - std::pow(o.beta1, t)), scalar);
  named["adamw.bc2_sqrt"] = at::scalar_tensor(std::sqrt(1.0 - std::pow(o.beta2, t)), scalar);
  // GatherStepInputs takes "input.N" from a vector by N; every other batch input by name.
  std::vector<at::Tensor> data;
  for (size_t i = 0; i < data_inputs_.size(); ++i) {
    const std::string& name = data_inputs_[i];
    size_t index = 0;
    if (absl::StartsWith(name, "input.") && absl::SimpleAtoi(name.substr(6), &index)) {
      if (data.size() <= index) data.resize(index + 1);
      data[index] = local_batch[i];
    } else {
      named[name] = local_batch[i];
    }
  }
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, GatherStepInputs(graph(), named, data));
  named.clear();
  if (step_times_ != nullptr) step_times_->BeforeRun(*executable_, /*profile_requested=*/false);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable_->Run(inputs));
  if (step_times_ != nullptr) step_times_->AfterRun(*executable_, graph());
  ++step_;
  double loss = 0;
  const auto& graph_outputs = graph().outputs();
  for (size_t i = 0; i < graph_outputs.size(); ++i) {
    const std::string& name = graph_outputs[i].name;
    if (name == "loss") {
      loss = outputs[i].item<double>();
    } else if (state_.count(name)) {
      state_[name] = outputs[i];
    } else if (at::Tensor* buffer = BufferUpdatedBy(name, buffers_)) {
      *buffer = outputs[i];
    } else if (absl::EndsWith(name, ".updated")) {
      return absl::InternalError(absl::StrCat("output ", name, " of @", graph().name(), " updates no buffer"));
    }
  }
  return loss;
}

double FxTrainer::next_learning_rate() const { return ScheduledLearningRate(lr_schedule_, adamw_.lr, step_ + 1); }

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FxTrainer::GatherFullParameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const FsdpGroupPlan& group : plan_.groups) {
    for (const std::string& name : group.params) {
      MAGI_ASSIGN_OR_RETURN(auto handle,
                            communicator_->Start(CollectiveKind::kAllGather, {state_.at(name + ".shard")}, "sum"));
      MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, handle->Wait());
      const std::vector<int64_t>& shape = full_shapes_.at(name);
      out.emplace_back(name, gathered[0].narrow(0, 0, shape[0]).reshape(shape).clone());
    }
  }
  return out;
}

// Where the communicator takes the checkpoint's tensors: where the state lives.
at::Device FxTrainer::state_device() const {
  return state_.empty() ? at::Device(at::kCPU) : state_.begin()->second.device();
}

absl::Status FxTrainer::SaveCheckpoint(const std::string& root, const CheckpointOptions& options) {
  return SaveCommittedCheckpoint(root, TrainerRankState(step_, state_, full_shapes_, buffers_), *communicator_,
                                 state_device(), options);
}

absl::Status FxTrainer::LoadCheckpoint(const std::string& root, const std::string& config) {
  MAGI_ASSIGN_OR_RETURN(RankState loaded,
                        LoadCommittedCheckpoint(root, TrainerRankState(step_, state_, full_shapes_, buffers_), config,
                                                *communicator_, state_device()));
  MAGI_ASSIGN_OR_RETURN(step_, RestoreTrainerRankState(std::move(loaded), state_, buffers_));
  return absl::OkStatus();
}

}  // namespace magi
