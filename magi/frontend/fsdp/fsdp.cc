#include "magi/frontend/fsdp/fsdp.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/cost/calibration.h"
#include "magi/cost/cost_model.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pipeline.h"
#include "magi/search/strategy_search.h"

namespace magi {
namespace {

struct Marked {
  std::weak_ptr<torch::nn::Module> module;
  FullyShardOptions options;
  int64_t world_size = 1;
  std::string axis;
};

std::mutex& MarksMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

std::vector<Marked>& Marks() {
  static auto* marks = new std::vector<Marked>();
  return *marks;
}

const Marked* FindMark(const torch::nn::Module* module) {
  for (const Marked& mark : Marks()) {
    auto locked = mark.module.lock();
    if (locked.get() == module) return &mark;
  }
  return nullptr;
}

// This rank's rows of `full`'s dim 0, zero-padded to whole shards, in fp32.
at::Tensor ShardOf(const at::Tensor& full_param, int64_t world, int rank) {
  at::Tensor full = full_param.detach().to(at::kFloat);
  int64_t rows = ShardRows(full.size(0), world);
  std::vector<int64_t> pad(2 * full.dim(), 0);
  pad.back() = rows * world - full.size(0);
  return at::constant_pad_nd(full, pad, 0).narrow(0, rank * rows, rows).clone();
}

// Reads the tensors named in `like` from a LibTorch archive, checking names and shapes.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadMatching(torch::serialize::InputArchive& archive,
                                                               const std::string& path,
                                                               const std::map<std::string, at::Tensor>& like) {
  std::map<std::string, at::Tensor> loaded;
  for (const auto& [name, current] : like) {
    at::Tensor tensor;
    if (!archive.try_read(name, tensor)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no ", name));
    }
    if (tensor.sizes() != current.sizes() || tensor.scalar_type() != current.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", name,
                                                     " does not match this run's shard"
                                                     " (another model, world size or rank?)"));
    }
    loaded[name] = tensor.to(current.device());
  }
  return loaded;
}

absl::Status LoadArchive(const std::string& path, torch::serialize::InputArchive& archive) {
  try {
    archive.load_from(path);
  } catch (const c10::Error& error) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, ": ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

// Inputs of `graph` by name from `named`, `data` (input.N) and the rng state.
absl::StatusOr<std::vector<at::Tensor>> GatherInputs(const Graph& graph, const std::map<std::string, at::Tensor>& named,
                                                     const std::vector<at::Tensor>& data) {
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const std::string& name = input->name();
    if (input->role() == InputRole::kRng) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      inputs.push_back(generator.get_state());
      continue;
    }
    if (absl::StartsWith(name, "input.")) {
      size_t index = std::stoul(name.substr(6));
      if (index >= data.size()) {
        return absl::InvalidArgumentError(absl::StrCat("the graph needs ", name, "; ", data.size(), " given"));
      }
      inputs.push_back(data[index]);
      continue;
    }
    auto it = named.find(name);
    if (it == named.end()) return absl::InternalError(absl::StrCat("no tensor for graph input %", name));
    inputs.push_back(it->second);
  }
  return inputs;
}

// Buffers and lifted constants by name.
void AddBuffersAndConstants(torch::nn::Module& root, const CapturedGraph& captured,
                            std::map<std::string, at::Tensor>& named) {
  for (const auto& item : root.named_buffers()) named[item.key()] = item.value();
  for (const auto& [name, tensor] : captured.constants) named[name] = tensor;
}

}  // namespace

absl::StatusOr<DeviceMesh> DeviceMesh::Create(std::vector<int64_t> shape, std::vector<std::string> axis_names,
                                              int rank) {
  if (shape.empty() || shape.size() != axis_names.size()) {
    return absl::InvalidArgumentError("a mesh needs one name per axis and at least one axis");
  }
  if (shape.size() > 1) return absl::UnimplementedError("2-D meshes (HSDP) are not supported yet");
  DeviceMesh mesh;
  mesh.shape_ = std::move(shape);
  mesh.axis_names_ = std::move(axis_names);
  mesh.rank_ = rank;
  if (rank < 0 || rank >= mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside a mesh of ", mesh.size()));
  }
  return mesh;
}

int64_t DeviceMesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

void FullyShard(torch::nn::Module& module, const DeviceMesh& mesh, const FullyShardOptions& options) {
  std::lock_guard<std::mutex> lock(MarksMutex());
  auto& marks = Marks();
  marks.erase(std::remove_if(marks.begin(), marks.end(),
                             [&](const Marked& m) { return m.module.expired() || m.module.lock().get() == &module; }),
              marks.end());
  marks.push_back({module.shared_from_this(), options, mesh.axis_size(0), mesh.axis_name(0)});
}

absl::StatusOr<FsdpPlan> PlanFromFullyShard(torch::nn::Module& root) {
  std::lock_guard<std::mutex> lock(MarksMutex());
  const Marked* root_mark = FindMark(&root);
  if (root_mark == nullptr) return absl::FailedPreconditionError("FullyShard was not called on the root module");
  FsdpPlan plan;
  plan.world_size = root_mark->world_size;
  plan.mesh_axis = root_mark->axis;
  plan.master_dtype = DType::kFloat32;
  plan.reduce_dtype = root_mark->options.mixed_precision.reduce_dtype;
  // Innermost groups claim their parameters first; deeper module paths sort after their parents.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> marked;
  for (const auto& item : root.named_modules("", /*include_self=*/true)) {
    if (FindMark(item.value().get()) != nullptr) marked.emplace_back(item.key(), item.value());
  }
  std::set<const c10::TensorImpl*> claimed;
  std::vector<FsdpGroupPlan> groups;
  for (auto it = marked.rbegin(); it != marked.rend(); ++it) {
    const Marked* mark = FindMark(it->second.get());
    if (mark->world_size != plan.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("module '", it->first, "' was sharded over ", mark->world_size,
                                                     " ranks, the root over ", plan.world_size));
    }
    FsdpGroupPlan group;
    group.name = it->first;
    group.reshard_after_forward = mark->options.reshard_after_forward;
    for (const auto& param : it->second->named_parameters(/*recurse=*/true)) {
      if (!claimed.insert(param.value().unsafeGetTensorImpl()).second) continue;
      group.params.push_back(it->first.empty() ? param.key() : it->first + "." + param.key());
    }
    groups.push_back(std::move(group));
  }
  // Forward order: outer modules after inner ones was for claiming; gathers follow uses anyway.
  plan.groups.assign(groups.rbegin(), groups.rend());
  return plan;
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
  MAGI_ASSIGN_OR_RETURN(trainer->captured_, CaptureTrainingStep(root, loss_fn, example_local_batch, capture_options));
  Graph* graph = trainer->captured_.graph();
  MAGI_RETURN_IF_ERROR(ShardForFsdp(*trainer->captured_.module, *graph, trainer->plan_));
  MAGI_RETURN_IF_ERROR(VerifyModule(*trainer->captured_.module));
  MAGI_RETURN_IF_ERROR(trainer->OptimizeStep(optimization));
  MAGI_ASSIGN_OR_RETURN(trainer->executable_, CompileForTorch(backend, *trainer->captured_.module, graph->name()));
  MAGI_RETURN_IF_ERROR(trainer->executable_->BindCommunicator(trainer->plan_.process_group, communicator));

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

absl::Status FsdpTrainer::OptimizeStep(const StepOptimization& optimization) {
  if (!optimization.passes.empty() && optimization.memory_budget_bytes > 0) {
    return absl::InvalidArgumentError(
        "give either a pass pipeline or a memory budget for the strategy search, not both");
  }
  MAGI_ASSIGN_OR_RETURN(DeviceProfile profile, LoadDeviceProfile(optimization.device_profile));
  std::unique_ptr<CalibrationTable> calibration;
  if (!optimization.calibration_csv.empty()) {
    MAGI_ASSIGN_OR_RETURN(CalibrationTable table, CalibrationTable::Load(optimization.calibration_csv));
    calibration = std::make_unique<CalibrationTable>(std::move(table));
  }
  CostModel model(std::move(profile), calibration.get());
  Module& module = *captured_.module;
  Graph& graph = *captured_.graph();
  if (optimization.memory_budget_bytes > 0) {
    SearchOptions options;
    options.memory_budget_bytes = optimization.memory_budget_bytes;
    MAGI_ASSIGN_OR_RETURN(StrategyPlan plan, SearchStrategy(module, graph.name(), model, options));
    strategy_report_ = FormatStrategyPlan(plan);
    applied_pipeline_ = plan.pipeline;
  } else {
    applied_pipeline_ = optimization.passes;
  }
  if (!applied_pipeline_.empty()) MAGI_RETURN_IF_ERROR(RunPassPipeline(applied_pipeline_, module).status());
  MAGI_ASSIGN_OR_RETURN(prediction_, Simulate(graph, model));
  return absl::OkStatus();
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
  AddBuffersAndConstants(*root_, captured_, named);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, GatherInputs(graph(), named, local_batch));
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable_->Run(inputs));
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

absl::Status FsdpTrainer::SaveCheckpoint(const std::string& path) const {
  std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& [name, tensor] : state_) archive.write(name, tensor.cpu());
    archive.write("magi.step", at::scalar_tensor(step_, at::kLong));
    // The default CPU generator's state, so random ops continue the same stream.
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      archive.write("magi.rng.cpu", generator.get_state());
    }
    archive.save_to(temp);
  } catch (const c10::Error& error) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write checkpoint ", path, ": ", error.what_without_backtrace()));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename the checkpoint onto ", path));
  }
  return absl::OkStatus();
}

absl::Status FsdpTrainer::LoadCheckpoint(const std::string& path) {
  torch::serialize::InputArchive archive;
  MAGI_RETURN_IF_ERROR(LoadArchive(path, archive));
  using TensorMap = std::map<std::string, at::Tensor>;
  MAGI_ASSIGN_OR_RETURN(TensorMap loaded, ReadMatching(archive, path, state_));
  at::Tensor step;
  if (!archive.try_read("magi.step", step)) return absl::InvalidArgumentError(absl::StrCat(path, " has no step"));
  at::Tensor rng;
  if (archive.try_read("magi.rng.cpu", rng)) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
  state_ = std::move(loaded);
  step_ = step.item<int64_t>();
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

namespace magi {

absl::StatusOr<std::unique_ptr<FsdpInference>> FsdpInference::Create(torch::nn::Module& root,
                                                                     const ForwardFunction& forward_fn,
                                                                     const std::vector<at::Tensor>& example_inputs,
                                                                     std::shared_ptr<Communicator> communicator,
                                                                     const std::string& backend) {
  auto inference = std::unique_ptr<FsdpInference>(new FsdpInference());
  inference->root_ = &root;
  MAGI_ASSIGN_OR_RETURN(FsdpPlan plan, PlanFromFullyShard(root));
  if (plan.world_size != communicator->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has ", plan.world_size, " ranks but the communicator ", communicator->size()));
  }
  plan.optimizer = false;
  MAGI_ASSIGN_OR_RETURN(inference->captured_, CaptureForward(root, forward_fn, example_inputs));
  Graph* graph = inference->captured_.graph();
  MAGI_RETURN_IF_ERROR(ShardForFsdp(*inference->captured_.module, *graph, plan));
  MAGI_RETURN_IF_ERROR(VerifyModule(*inference->captured_.module));
  MAGI_ASSIGN_OR_RETURN(inference->executable_, CompileForTorch(backend, *inference->captured_.module, graph->name()));
  MAGI_RETURN_IF_ERROR(inference->executable_->BindCommunicator(plan.process_group, communicator));
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters()) params[item.key()] = item.value();
  for (const FsdpGroupPlan& group : plan.groups) {
    for (const std::string& name : group.params) {
      inference->shards_[name + ".shard"] = ShardOf(params.at(name), plan.world_size, communicator->rank());
    }
  }
  return inference;
}

absl::Status FsdpInference::LoadShardsFromCheckpoint(const std::string& path) {
  torch::serialize::InputArchive archive;
  MAGI_RETURN_IF_ERROR(LoadArchive(path, archive));
  MAGI_ASSIGN_OR_RETURN(shards_, ReadMatching(archive, path, shards_));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> FsdpInference::Run(const std::vector<at::Tensor>& inputs) {
  std::map<std::string, at::Tensor> named = shards_;
  AddBuffersAndConstants(*root_, captured_, named);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> bound, GatherInputs(graph(), named, inputs));
  return executable_->Run(bound);
}

}  // namespace magi
