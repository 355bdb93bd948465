#include "magi/frontend/fsdp/trainer.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"
#include "magi/frontend/fsdp/materialize.h"
#include "magi/frontend/fsdp/split_state.h"
#include "magi/ir/graph_utils.h"
#include "magi/training/checkpoint.h"
#include "magi/training/compile_for_torch.h"
#include "magi/training/plan_check.h"
#include "magi/training/step_calibration.h"
#include "magi/training/step_inputs.h"

namespace magi {

absl::StatusOr<CompiledStep> CompileCapturedForTorch(CapturedGraph captured, const CompileOptions& options,
                                                     TorchExecutable** executable) {
  return CompileForTorch(std::move(captured.module), captured.graph_name, options, executable);
}

absl::StatusOr<std::unique_ptr<FsdpTrainer>> FsdpTrainer::Create(
    torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
    std::shared_ptr<Communicator> communicator, const AdamWOptions& adamw, const CaptureOptions& capture_options,
    const CompileOptions& compile, const TrainingOptions& training) {
  MAGI_ASSIGN_OR_RETURN(FsdpPlan plan, PlanFromFullyShard(root));
  if (plan.replicate_size > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has a replicate axis '", plan.replicate_axis,
                     "': pass one communicator per axis (CreateMeshCommunicators)"));
  }
  return Create(root, loss_fn, example_local_batch, MeshCommunicators{{plan.mesh_axis, std::move(communicator)}},
                adamw, capture_options, compile, training);
}

absl::StatusOr<std::unique_ptr<FsdpTrainer>> FsdpTrainer::Create(
    torch::nn::Module& root, const LossFunction& loss_fn, const std::vector<at::Tensor>& example_local_batch,
    const MeshCommunicators& communicators, const AdamWOptions& adamw, const CaptureOptions& capture_options,
    const CompileOptions& compile, const TrainingOptions& training) {
  auto trainer = std::unique_ptr<FsdpTrainer>(new FsdpTrainer());
  // Empty for a module not owned by a shared_ptr: ReleaseModuleParameters cannot reach it.
  trainer->root_ = root.weak_from_this();
  trainer->adamw_ = adamw;
  trainer->training_ = training;
  if (training.grad_accum < 1) return absl::InvalidArgumentError("grad_accum must be >= 1");
  MAGI_RETURN_IF_ERROR(CheckTrainingCompileOptions(compile, "FsdpTrainer"));
  MAGI_ASSIGN_OR_RETURN(trainer->plan_, PlanFromFullyShard(root));
  FsdpPlan& plan = trainer->plan_;
  auto communicator_of = [&](const std::string& axis, int64_t size) -> absl::StatusOr<std::shared_ptr<Communicator>> {
    auto it = communicators.find(axis);
    if (it == communicators.end() || it->second == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no communicator for mesh axis '", axis, "'"));
    }
    if (it->second->size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("mesh axis '", axis, "' has ", size,
                                                     " ranks but its communicator ", it->second->size()));
    }
    return it->second;
  };
  MAGI_ASSIGN_OR_RETURN(trainer->communicator_, communicator_of(plan.mesh_axis, plan.world_size));
  std::shared_ptr<Communicator> replicate;
  if (plan.replicate_size > 1) {
    MAGI_ASSIGN_OR_RETURN(replicate, communicator_of(plan.replicate_axis, plan.replicate_size));
  }
  trainer->replicate_communicator_ = replicate;
  plan.adamw = {adamw.beta1, adamw.beta2, adamw.eps};
  plan.clip_grad_norm = training.clip_grad_norm;

  // A model on meta is captured there (allocating nothing), for the CPU unless told otherwise.
  const bool on_meta = IsOnMeta(root);
  if (on_meta && !training.init_seed) {
    return absl::FailedPreconditionError(
        "the module is on the meta device: set TrainingOptions::init_seed to materialize its shards");
  }
  CaptureOptions capture = capture_options;
  std::vector<at::Tensor> example = example_local_batch;
  if (on_meta) {
    if (!capture.device) capture.device = Device{DeviceType::kCpu, -1};
    for (at::Tensor& tensor : example) tensor = at::empty(tensor.sizes(), tensor.options().device(at::kMeta));
  }
  MAGI_ASSIGN_OR_RETURN(CapturedGraph captured, CaptureTrainingStep(root, loss_fn, example, capture));
  // Where the step computes and the communicators take tensors: the parameters' device
  // (the state may live elsewhere: CPU offload keeps it on the host).
  for (const Value* input : captured.graph()->inputs()) {
    if (input->role() == InputRole::kParam) trainer->compute_device_ = compat::ToTorchDevice(input->type().tensor().device);
  }
  trainer->constants_ = captured.constants;
  for (const auto& [name, constant] : trainer->constants_) {
    if (constant.is_meta()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the step reads a tensor created on the meta device outside the module (lifted as ", name,
          "): make it a buffer of the module so it is materialized"));
    }
  }

  CompileOptions options = compile;
  if (training.split_master_weights) AddSplitMasterWeights(options);
  {
    // The step runs where its state will live: the capture device, else the example's.
    at::Device device = capture.device ? compat::ToTorchDevice(*capture.device)
                                       : (example.empty() ? at::Device(at::kCPU) : example[0].device());
    std::map<std::string, std::shared_ptr<Communicator>> groups = {{plan.process_group, trainer->communicator_}};
    if (replicate != nullptr) groups[plan.replicate_group] = replicate;
    MAGI_RETURN_IF_ERROR(SetStepCalibration(training.calibration, groups, device, options.cost_model));
    trainer->step_times_ = StepTimeRecorder::Create(options.cost_model, device);
  }
  // reshard_after_forward=K: backward gathers over the post-forward groups of K ranks.
  std::map<std::string, std::shared_ptr<Communicator>> post_forward;  // IR group name -> communicator
  for (const FsdpGroupPlan& group : plan.groups) {
    const int64_t k = group.post_forward_size;
    if (k == 0 || post_forward.count(PostForwardGroupName(plan.process_group, k))) continue;
    const std::string axis = PostForwardGroupName(plan.mesh_axis, k);
    if (communicators.find(axis) == communicators.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FullyShard(reshard_after_forward=", k, ") on '", group.name.empty() ? "root" : group.name,
          "' needs the communicator of its post-forward group '", axis,
          "': create the mesh's communicators with CreateMeshCommunicators(mesh, name, options, {", k, "})"));
    }
    MAGI_ASSIGN_OR_RETURN(post_forward[PostForwardGroupName(plan.process_group, k)], communicator_of(axis, k));
  }
  auto bind = [&](TorchExecutable& executable, const Module& module) -> absl::Status {
    MAGI_RETURN_IF_ERROR(executable.BindCommunicator(plan.process_group, trainer->communicator_));
    if (replicate != nullptr) MAGI_RETURN_IF_ERROR(executable.BindCommunicator(plan.replicate_group, replicate));
    for (const auto& [name, communicator] : post_forward) {
      if (module.FindProcessGroup(name) != nullptr) MAGI_RETURN_IF_ERROR(executable.BindCommunicator(name, communicator));
    }
    return absl::OkStatus();
  };
  if (training.grad_accum > 1) {
    // Micro-batches 1..N-1 accumulate unsharded gradients locally (no reduction, no
    // optimizer); the step graph adds them to its own before its one reduce-scatter.
    FsdpPlan accumulate = plan;
    accumulate.gradient_sync = false;
    accumulate.accumulated_gradient_input = true;
    accumulate.optimizer = false;
    accumulate.clip_grad_norm = 0;
    CapturedGraph copy;
    copy.module = CloneModule(*captured.module);
    copy.graph_name = captured.graph_name;
    options.sharding = accumulate;
    TorchExecutable* executable = nullptr;
    MAGI_ASSIGN_OR_RETURN(CompiledStep compiled, CompileCapturedForTorch(std::move(copy), options, &executable));
    trainer->accumulate_.emplace(std::move(compiled));
    trainer->accumulate_executable_ = executable;
    MAGI_RETURN_IF_ERROR(bind(*executable, trainer->accumulate_->module()));
    plan.accumulated_gradient_input = true;
    plan.gradient_divisor = training.grad_accum;
  }
  options.sharding = plan;
  trainer->compile_options_ = options;
  MAGI_ASSIGN_OR_RETURN(trainer->compiled_, CompileCapturedForTorch(std::move(captured), options, &trainer->executable_));
  MAGI_RETURN_IF_ERROR(bind(*trainer->executable_, trainer->compiled_.module()));
  {
    // Before any step runs (the runs' additions are counted from what is held now); both
    // executables run from the caller's stream: its workspace counted once.
    const int64_t held = trainer->executable_->LibraryDeviceBytesHeld();
    const int64_t step_adds = trainer->executable_->LibraryDeviceBytesRunsAdd(/*count_caller_stream=*/true);
    const int64_t accumulate_adds = trainer->accumulate_executable_ != nullptr
                                        ? trainer->accumulate_executable_->LibraryDeviceBytesRunsAdd(false)
                                        : 0;
    trainer->predicted_library_device_bytes_ =
        held < 0 || step_adds < 0 || accumulate_adds < 0 ? -1 : held + step_adds + accumulate_adds;
  }
  // Capture leaves the module's buffers as they were (the first step reads them): the
  // trainer references them and replaces its references when a step updates them.
  trainer->buffers_ = TakeBuffers(root);

  // This rank's rows of every parameter, padded to whole shards; zero moments.
  const int64_t world = plan.world_size;
  const int rank = trainer->communicator_->rank();
  std::map<std::string, at::Tensor> shards;
  if (on_meta) {
    MAGI_ASSIGN_OR_RETURN(MaterializedShards materialized, MaterializeShards(root, plan, rank, *training.init_seed));
    shards = std::move(materialized.shards);
    trainer->full_shapes_ = std::move(materialized.full_shapes);
    trainer->buffers_ = std::move(materialized.buffers);
  } else {
    std::map<std::string, at::Tensor> params;
    for (const auto& item : root.named_parameters()) params[item.key()] = item.value();
    for (const FsdpGroupPlan& group : plan.groups) {
      for (const std::string& name : group.params) {
        shards[name] = ShardRowsOf(params.at(name), world, rank);
        trainer->full_shapes_[name] = params.at(name).sizes().vec();
      }
    }
  }
  // Each state tensor goes where the step takes it (the graph input's device: the host
  // with CPU offload, pinned when CUDA is there so copies to the device run at full speed).
  std::map<std::string, at::Device> state_devices;
  for (const Value* input : trainer->graph().inputs()) {
    state_devices.emplace(input->name(), compat::ToTorchDevice(input->type().tensor().device));
  }
  // `tensor` on the device of the graph input `name` (or of its split half, below).
  auto on_input_device = [&](const std::string& name, at::Tensor tensor) {
    auto it = state_devices.find(name);
    if (it == state_devices.end()) it = state_devices.find(name + ".hi");  // held split (below)
    if (it != state_devices.end() && tensor.device() != it->second) tensor = tensor.to(it->second);
    return tensor;
  };
  auto place = [&](const std::string& name, at::Tensor tensor) {
    trainer->state_[name] = on_input_device(name, std::move(tensor));
  };
  MAGI_RETURN_IF_ERROR(
      compat::CallTorch(absl::StatusCode::kResourceExhausted, "allocating the shards and AdamW moments", [&] {
        for (auto& [name, shard] : shards) {
          place(name + ".exp_avg", at::zeros_like(shard));
          place(name + ".exp_avg_sq", at::zeros_like(shard));
          place(name + ".shard", std::move(shard));
        }
      }));
  // Buffers materialized from meta are made on the host, like the shards; the step reads
  // them where its inputs say (a CUDA step: on the GPU).
  if (on_meta) {
    MAGI_RETURN_IF_ERROR(compat::CallTorch(
        absl::StatusCode::kResourceExhausted, "moving the materialized buffers to the step's device",
        [&] {
          for (auto& [name, buffer] : trainer->buffers_) buffer = on_input_device(name, buffer);
        }));
  }
  trainer->split_state_ = SplitStateNames(trainer->graph(), trainer->state_);
  MAGI_RETURN_IF_ERROR(SplitStateEntries(trainer->split_state_, trainer->state_));
  if (training.split_master_weights && trainer->split_state_.empty()) {
    std::string note =
        "split_master_weights: no parameter shard qualifies (each must be fp32, only cast to bf16 where it is, "
        "and updated by AdamW); the masters stay fp32";
    std::fprintf(stderr, "magi: %s\n", note.c_str());
    trainer->compiled_.notes.push_back(std::move(note));
  }
  if (plan.cpu_offload && at::globalContext().hasCUDA()) {
    // Host state is pinned, so copies to the device run at full speed (after the split:
    // the halves are new tensors).
    MAGI_RETURN_IF_ERROR(compat::CallTorch(absl::StatusCode::kResourceExhausted, "pinning the host state", [&] {
      for (auto& [name, tensor] : trainer->state_) {
        if (tensor.is_cpu() && !tensor.is_pinned()) tensor = tensor.pin_memory();
      }
    }));
  }
  if (options.deterministic && !trainer->state_.empty()) {
    MAGI_RETURN_IF_ERROR(CheckRanksAgreeOnPlan(*trainer->communicator_, trainer->plan_hash(), trainer->compute_device_));
  }
  return trainer;
}

double FsdpTrainer::next_learning_rate() const {
  return ScheduledLearningRate(training_.lr_schedule, adamw_.lr, step_ + 1);
}

absl::StatusOr<std::map<std::string, at::Tensor>> FsdpTrainer::RunGraph(TorchExecutable& executable,
                                                                        const Graph& graph,
                                                                        std::map<std::string, at::Tensor> named,
                                                                        const std::vector<at::Tensor>& data) {
  AddBuffersAndConstants(buffers_, constants_, named);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, GatherStepInputs(graph, named, data));
  named.clear();  // `inputs` holds the only references the trainer gave: the executable owns them
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable.RunDonating(std::move(inputs)));
  std::map<std::string, at::Tensor> by_name;
  const auto& graph_outputs = graph.outputs();
  for (size_t i = 0; i < graph_outputs.size(); ++i) by_name[graph_outputs[i].name] = std::move(outputs[i]);
  return by_name;
}

absl::StatusOr<double> FsdpTrainer::Step(const std::vector<at::Tensor>& local_batch) {
  const int n = training_.grad_accum;
  std::vector<std::vector<at::Tensor>> micro(n);
  for (const at::Tensor& tensor : local_batch) {
    if (n > 1 && (tensor.dim() == 0 || tensor.size(0) % n != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("a batch tensor of shape ", c10::str(tensor.sizes()),
                                                     " does not split into ", n, " micro-batches on dim 0"));
    }
    const int64_t rows = n > 1 ? tensor.size(0) / n : 0;
    for (int k = 0; k < n; ++k) micro[k].push_back(n > 1 ? tensor.narrow(0, k * rows, rows) : tensor);
  }
  double loss_sum = 0;
  std::map<std::string, at::Tensor> accumulated;  // "<param>.grad.acc"
  if (n > 1) {
    for (const Value* input : accumulate_->graph().inputs()) {
      const std::string& name = input->name();
      if (absl::EndsWith(name, ".grad.acc")) {
        const TensorType& type = input->type().tensor();
        MAGI_ASSIGN_OR_RETURN(c10::ScalarType scalar_type, compat::ToScalarType(type.dtype));
        accumulated[name] =
            at::zeros(type.sizes, at::TensorOptions().dtype(scalar_type).device(compat::ToTorchDevice(type.device)));
      }
    }
    for (int k = 0; k + 1 < n; ++k) {
      std::map<std::string, at::Tensor> named = std::move(accumulated);
      accumulated.clear();
      for (const auto& [name, tensor] : state_) {
        if (absl::EndsWith(name, ".shard")) named[name] = tensor;
      }
      // The micro-batch graph takes the fp32 masters (it has no AdamW, so nothing was
      // split in it): joined for its run.
      for (const std::string& name : split_state_) {
        MAGI_ASSIGN_OR_RETURN(named[name], JoinedEntry(name, state_));
      }
      MAGI_ASSIGN_OR_RETURN(auto outputs,
                            RunGraph(*accumulate_executable_, accumulate_->graph(), std::move(named), micro[k]));
      for (auto& [name, tensor] : outputs) {
        if (name == "loss") {
          loss_sum += tensor.item<double>();
        } else if (absl::EndsWith(name, ".grad.acc")) {
          accumulated[name] = std::move(tensor);
        } else if (at::Tensor* buffer = BufferUpdatedBy(name, buffers_)) {
          *buffer = std::move(tensor);
        }
      }
    }
  }

  const int64_t t = step_ + 1;
  const AdamWOptions& o = adamw_;
  const double lr = ScheduledLearningRate(training_.lr_schedule, o.lr, t);
  double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  if (!step_bindings_) {
    // The AdamW scalars are the same tensors every step, written in place: a CUDA graph
    // reads them where it captured them (no copy into it, no allocation).
    at::TensorOptions scalar = at::TensorOptions().dtype(at::kFloat);
    for (const Value* input : graph().inputs()) {
      if (input->name() == "adamw.decay") scalar = scalar.device(compat::ToTorchDevice(input->type().tensor().device));
    }
    for (at::Tensor* tensor : {&adamw_decay_, &adamw_step_size_, &adamw_bc2_sqrt_}) {
      if (!tensor->defined()) *tensor = at::empty({}, scalar);  // kept across rebinds: a graph captured them
    }
    MAGI_ASSIGN_OR_RETURN(step_bindings_,
                          StepBindings::Bind(graph(), state_, buffers_, constants_,
                                             {{"adamw.decay", &adamw_decay_},
                                              {"adamw.step_size", &adamw_step_size_},
                                              {"adamw.bc2_sqrt", &adamw_bc2_sqrt_}}));
  }
  adamw_decay_.fill_(1.0 - lr * o.weight_decay);
  adamw_step_size_.fill_(lr / bias1);
  adamw_bc2_sqrt_.fill_(std::sqrt(bias2));
  // The state is donated (AdamW updates it in place); the trainer's references stay, and
  // a failed step leaves them as they were: collectives fail before AdamW runs (it is the
  // graph's tail).
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, step_bindings_->Gather(micro[n - 1], accumulated));
  if (step_times_ != nullptr) step_times_->BeforeRun(*executable_, profile_nodes_);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable_->RunDonating(std::move(inputs)));
  if (step_times_ != nullptr) step_times_->AfterRun(*executable_, graph());
  // New state and running statistics (the next step reads these), then the two numbers.
  MAGI_ASSIGN_OR_RETURN(StepBindings::Scalars scalars, step_bindings_->Take(std::move(outputs)));
  if (scalars.loss.defined()) loss_sum += scalars.loss.item<double>();
  if (scalars.grad_norm.defined()) last_grad_norm_ = scalars.grad_norm.item<double>();
  step_ = t;
  return loss_sum / n;
}

void FsdpTrainer::ReleaseModuleParameters() {
  std::shared_ptr<torch::nn::Module> root = root_.lock();
  if (root == nullptr) return;
  at::NoGradGuard no_grad;
  for (const auto& item : root->named_parameters()) {
    at::Tensor param = item.value();
    if (param.is_meta()) continue;  // holds no memory
    param.set_data(at::empty({0}, param.options()));
    if (param.grad().defined()) param.mutable_grad() = at::Tensor();
  }
}

absl::StatusOr<RankState> FsdpTrainer::CheckpointState() const {
  // Split masters are saved joined: checkpoints do not depend on split_master_weights.
  MAGI_ASSIGN_OR_RETURN(auto state, JoinedState(split_state_, state_));
  return TrainerRankState(step_, state, full_shapes_, buffers_);
}

absl::Status FsdpTrainer::SaveCheckpoint(const std::string& root, const CheckpointOptions& options) {
  MAGI_ASSIGN_OR_RETURN(RankState state, CheckpointState());
  return SaveCommittedCheckpoint(root, state, CheckpointMesh(*communicator_, replicate_communicator_.get()),
                                 compute_device_, options);
}

absl::Status FsdpTrainer::LoadCheckpoint(const std::string& root, const std::string& config) {
  // Read as checkpointed (split masters joined), shaped by a template that holds no
  // copy of the state, then split again before anything of the trainer changes.
  RankState like = TrainerRankState(step_, JoinedStateLike(split_state_, state_), full_shapes_, buffers_);
  MAGI_ASSIGN_OR_RETURN(RankState loaded,
                        LoadCommittedCheckpoint(root, like, config,
                                                CheckpointMesh(*communicator_, replicate_communicator_.get()),
                                                compute_device_));
  MAGI_RETURN_IF_ERROR(SplitStateEntries(split_state_, loaded.sharded));
  step_bindings_.reset();  // the state and buffer maps are replaced (even if the restore fails late)
  MAGI_ASSIGN_OR_RETURN(step_, RestoreTrainerRankState(std::move(loaded), state_, buffers_));
  if (plan_.cpu_offload && at::globalContext().hasCUDA()) {  // host state is pinned, as Create leaves it
    for (auto& [name, tensor] : state_) {
      if (tensor.is_cpu() && !tensor.is_pinned()) tensor = tensor.pin_memory();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FsdpTrainer::GatherFullParameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const FsdpGroupPlan& group : plan_.groups) {
    for (const std::string& name : group.params) {
      // The communicator takes tensors on the compute device (the shard may be on the host).
      MAGI_ASSIGN_OR_RETURN(at::Tensor shard, JoinedEntry(name + ".shard", state_));
      shard = shard.to(compute_device_);
      MAGI_ASSIGN_OR_RETURN(auto handle, communicator_->Start(CollectiveKind::kAllGather, {shard}, "sum"));
      MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, handle->Wait());
      const std::vector<int64_t>& shape = full_shapes_.at(name);
      out.emplace_back(name, gathered[0].narrow(0, 0, shape[0]).clone());
    }
  }
  return out;
}

}  // namespace magi
