#include "magi/frontend/fsdp/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/frontend/fsdp/checkpoint.h"
#include "magi/frontend/fsdp/step_inputs.h"

namespace magi {

absl::StatusOr<CompiledStep> CompileCapturedForTorch(CapturedGraph captured, const CompileOptions& options,
                                                     TorchExecutable** executable) {
  MAGI_ASSIGN_OR_RETURN(CompiledStep compiled,
                        Compile(std::move(captured.module), captured.graph_name, options));
  *executable = dynamic_cast<TorchExecutable*>(compiled.executable.get());
  if (*executable == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend '", options.backend, "' does not run LibTorch tensors"));
  }
  return compiled;
}

absl::StatusOr<std::unique_ptr<FsdpTrainer>> FsdpTrainer::Create(
    torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
    std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options,
    const std::string& backend, const StepOptimization& optimization) {
  auto trainer = std::unique_ptr<FsdpTrainer>(new FsdpTrainer());
  trainer->root_ = &root;
  trainer->adamw_ = adamw;
  trainer->communicator_ = communicator;
  MAGI_ASSIGN_OR_RETURN(trainer->plan_, PlanFromFullyShard(root));
  if (trainer->plan_.world_size != communicator->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has ", trainer->plan_.world_size, " ranks but the communicator ", communicator->size()));
  }
  trainer->plan_.adamw = {adamw.beta1, adamw.beta2, adamw.eps};
  MAGI_ASSIGN_OR_RETURN(CapturedGraph captured, CaptureTrainingStep(root, loss_fn, example_local_batch, capture_options));
  trainer->constants_ = captured.constants;

  CompileOptions options;
  options.sharding = trainer->plan_;
  options.optimization.passes = optimization.passes;
  options.optimization.memory_budget_bytes = optimization.memory_budget_bytes;
  options.cost_model.device_profile = optimization.device_profile;
  options.cost_model.calibration_csv = optimization.calibration_csv;
  options.partitioning.backends = optimization.partition_backends;
  options.partitioning.min_nodes = optimization.partition_min_nodes;
  options.partitioning.max_nodes = optimization.partition_max_nodes;
  options.backend = backend;
  MAGI_ASSIGN_OR_RETURN(trainer->compiled_, CompileCapturedForTorch(std::move(captured), options, &trainer->executable_));
  MAGI_RETURN_IF_ERROR(trainer->executable_->BindCommunicator(trainer->plan_.process_group, communicator));
  trainer->buffers_ = BuffersTheGraphReads(trainer->graph(), root);

  // This rank's rows of every parameter, padded to whole shards; zero moments.
  const int64_t world = trainer->plan_.world_size;
  const int rank = communicator->rank();
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters()) params[item.key()] = item.value();
  for (const FsdpGroupPlan& group : trainer->plan_.groups) {
    for (const std::string& name : group.params) {
      at::Tensor shard = ShardOf(params.at(name), world, rank);
      trainer->full_shapes_[name] = params.at(name).sizes().vec();
      trainer->state_[name + ".shard"] = shard;
      trainer->state_[name + ".exp_avg"] = at::zeros_like(shard);
      trainer->state_[name + ".exp_avg_sq"] = at::zeros_like(shard);
    }
  }
  return trainer;
}

absl::StatusOr<double> FsdpTrainer::Step(const std::vector<at::Tensor>& local_batch) {
  ++step_;
  const AdamWOptions& o = adamw_;
  double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(step_));
  double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(step_));
  at::TensorOptions scalar = at::TensorOptions().dtype(at::kFloat);
  for (const Value* input : graph().inputs()) {
    if (input->name() == "adamw.decay") scalar = scalar.device(compat::ToTorchDevice(input->type().tensor().device));
  }
  std::map<std::string, at::Tensor> named = state_;
  named["adamw.decay"] = at::scalar_tensor(1.0 - o.lr * o.weight_decay, scalar);
  named["adamw.step_size"] = at::scalar_tensor(o.lr / bias1, scalar);
  named["adamw.bc2_sqrt"] = at::scalar_tensor(std::sqrt(bias2), scalar);
  for (const auto& [name, tensor] : buffers_) named[name] = tensor;
  for (const auto& [name, tensor] : constants_) named[name] = tensor;
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, GatherStepInputs(graph(), named, local_batch));
  named.clear();  // `inputs` holds what the step needs
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable_->Run(inputs));
  TakeUpdatedBuffers(graph(), outputs, buffers_);  // running statistics: the next step reads these
  double loss = 0;
  const auto& graph_outputs = graph().outputs();
  for (size_t i = 0; i < graph_outputs.size(); ++i) {
    const std::string& name = graph_outputs[i].name;
    if (name == "loss") {
      loss = outputs[i].item<double>();
    } else if (state_.count(name)) {
      state_[name] = outputs[i];
    }
  }
  return loss;
}

void FsdpTrainer::ReleaseModuleParameters() {
  at::NoGradGuard no_grad;
  for (const auto& item : root_->named_parameters()) {
    at::Tensor param = item.value();
    param.set_data(at::empty({0}, param.options()));
    if (param.grad().defined()) param.mutable_grad() = at::Tensor();
  }
}

namespace {

constexpr char kRngKey[] = "magi.rng.cpu";
constexpr const char* kStateSuffixes[] = {".shard", ".exp_avg", ".exp_avg_sq"};

at::Device DeviceOf(const std::map<std::string, at::Tensor>& state) {
  return state.empty() ? at::Device(at::kCPU) : state.begin()->second.device();
}

}  // namespace

RankState FsdpTrainer::CheckpointState() const {
  RankState state;
  state.step = step_;
  for (const auto& [param, shape] : full_shapes_) {
    for (const char* suffix : kStateSuffixes) {
      std::string name = param + suffix;
      state.sharded[name] = state_.at(name);
      state.full_shapes[name] = shape;
    }
  }
  for (const auto& [name, tensor] : buffers_) state.per_rank["buffer." + name] = tensor;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  state.per_rank[kRngKey] = generator.get_state();
  return state;
}

absl::Status FsdpTrainer::SaveCheckpoint(const std::string& root, const CheckpointOptions& options) {
  return SaveCommittedCheckpoint(root, CheckpointState(), *communicator_, DeviceOf(state_), options);
}

absl::Status FsdpTrainer::LoadCheckpoint(const std::string& root, const std::string& config) {
  MAGI_ASSIGN_OR_RETURN(RankState loaded, LoadCommittedCheckpoint(root, CheckpointState(), config, *communicator_,
                                                                  DeviceOf(state_)));
  for (auto& [name, tensor] : loaded.sharded) state_[name] = std::move(tensor);
  for (auto& [name, tensor] : buffers_) tensor = loaded.per_rank.at("buffer." + name);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(loaded.per_rank.at(kRngKey));
  }
  step_ = loaded.step;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FsdpTrainer::GatherFullParameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const FsdpGroupPlan& group : plan_.groups) {
    for (const std::string& name : group.params) {
      MAGI_ASSIGN_OR_RETURN(auto handle,
                            communicator_->Start(CollectiveKind::kAllGather, {state_.at(name + ".shard")}, "sum"));
      MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, handle->Wait());
      const std::vector<int64_t>& shape = full_shapes_.at(name);
      out.emplace_back(name, gathered[0].narrow(0, 0, shape[0]).clone());
    }
  }
  return out;
}

}  // namespace magi
