#include "magi/frontend/fsdp/fully_shard.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace magi {
namespace {

struct Marked {
  std::weak_ptr<torch::nn::Module> module;
  FullyShardOptions options;
  DeviceMesh mesh;
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

}  // namespace

absl::StatusOr<DeviceMesh> DeviceMesh::Create(std::vector<int64_t> shape, std::vector<std::string> axis_names,
                                              int rank) {
  if (shape.empty() || shape.size() != axis_names.size()) {
    return absl::InvalidArgumentError("a mesh needs one name per axis and at least one axis");
  }
  if (shape.size() > 2) {
    return absl::UnimplementedError(
        absl::StrCat("meshes of ", shape.size(), " axes: 1-D (FSDP) and 2-D (HSDP: replicate x shard) only"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) return absl::InvalidArgumentError(absl::StrCat("mesh axis '", axis_names[i], "' has size ", shape[i]));
    for (size_t j = 0; j < i; ++j) {
      if (axis_names[i] == axis_names[j]) {
        return absl::InvalidArgumentError(absl::StrCat("mesh axis name '", axis_names[i], "' is used twice"));
      }
    }
  }
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

int64_t DeviceMesh::coordinate(size_t axis) const {
  int64_t stride = 1;
  for (size_t a = axis + 1; a < shape_.size(); ++a) stride *= shape_[a];
  return (rank_ / stride) % shape_.at(axis);
}

std::vector<int> DeviceMesh::GroupRanks(size_t axis) const {
  int64_t stride = 1;
  for (size_t a = axis + 1; a < shape_.size(); ++a) stride *= shape_[a];
  const int64_t first = rank_ - coordinate(axis) * stride;
  std::vector<int> ranks;
  for (int64_t i = 0; i < shape_.at(axis); ++i) ranks.push_back(static_cast<int>(first + i * stride));
  return ranks;
}

std::string DeviceMesh::GroupName(size_t axis) const {
  std::string name = axis_names_.at(axis);
  for (size_t a = 0; a < shape_.size(); ++a) {
    if (a != axis) absl::StrAppend(&name, ".", coordinate(a));
  }
  return name;
}

absl::StatusOr<ReshardAfterForwardOption> ReshardAfterForwardOption::Parse(absl::string_view text) {
  if (text == "true") return ReshardAfterForwardOption(true);
  if (text == "false") return ReshardAfterForwardOption(false);
  int size = 0;
  if (absl::SimpleAtoi(text, &size) && size > 0) return ReshardAfterForwardOption(size);
  return absl::InvalidArgumentError(absl::StrCat("reshard_after_forward is true, false or a number of ranks, not '",
                                                 text, "'"));
}

std::string ReshardAfterForwardOption::ToString() const {
  if (size_) return absl::StrCat(*size_);
  return reshard_ ? "true" : "false";
}

void FullyShard(torch::nn::Module& module, const DeviceMesh& mesh, const FullyShardOptions& options) {
  std::lock_guard<std::mutex> lock(MarksMutex());
  auto& marks = Marks();
  marks.erase(std::remove_if(marks.begin(), marks.end(),
                             [&](const Marked& m) { return m.module.expired() || m.module.lock().get() == &module; }),
              marks.end());
  marks.push_back({module.shared_from_this(), options, mesh});
}

absl::StatusOr<FsdpPlan> PlanFromFullyShard(torch::nn::Module& root) {
  std::lock_guard<std::mutex> lock(MarksMutex());
  const Marked* root_mark = FindMark(&root);
  if (root_mark == nullptr) return absl::FailedPreconditionError("FullyShard was not called on the root module");
  FsdpPlan plan;
  const DeviceMesh& mesh = root_mark->mesh;
  const size_t shard_axis = mesh.num_axes() - 1;  // HSDP: {replicate, shard}
  plan.world_size = mesh.axis_size(shard_axis);
  plan.mesh_axis = mesh.axis_name(shard_axis);
  plan.process_group = mesh.axis_name(shard_axis);
  if (mesh.num_axes() == 2) {
    plan.replicate_size = mesh.axis_size(0);
    plan.replicate_axis = mesh.axis_name(0);
    plan.replicate_group = mesh.axis_name(0);
  }
  plan.master_dtype = DType::kFloat32;
  plan.reduce_dtype = root_mark->options.mixed_precision.reduce_dtype;
  plan.cpu_offload = root_mark->options.cpu_offload;
  // Innermost groups claim their parameters first; deeper module paths sort after their parents.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> marked;
  for (const auto& item : root.named_modules("", /*include_self=*/true)) {
    if (FindMark(item.value().get()) != nullptr) marked.emplace_back(item.key(), item.value());
  }
  std::set<const c10::TensorImpl*> claimed;
  std::vector<FsdpGroupPlan> groups;
  for (auto it = marked.rbegin(); it != marked.rend(); ++it) {
    const Marked* mark = FindMark(it->second.get());
    if (!(mark->mesh == mesh)) {
      return absl::InvalidArgumentError(absl::StrCat("module '", it->first, "' was sharded over a mesh of ",
                                                     mark->mesh.size(), " ranks (", mark->mesh.num_axes(),
                                                     " axes), the root over another of ", mesh.size()));
    }
    const std::string where = it->first.empty() ? "the root module" : absl::StrCat("module '", it->first, "'");
    if (mark->options.cpu_offload != plan.cpu_offload) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has cpu_offload ", mark->options.cpu_offload ? "on" : "off", ", the root ",
          plan.cpu_offload ? "on" : "off", ": the optimizer state of all groups is offloaded or none"));
    }
    FsdpGroupPlan group;
    group.name = it->first;
    const ReshardAfterForwardOption& reshard = mark->options.reshard_after_forward;
    group.reshard_after_forward = reshard.reshards();
    if (reshard.size()) {
      const int64_t k = *reshard.size();
      if (k <= 1 || k >= plan.world_size || plan.world_size % k != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FullyShard on ", where, ": reshard_after_forward=", k, " must divide the ", plan.world_size,
            " ranks of mesh axis '", plan.mesh_axis, "' and be neither 1 nor ", plan.world_size,
            " (the smaller group to reshard to after forward; true or false otherwise)"));
      }
      group.post_forward_size = k;
    }
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

}  // namespace magi
