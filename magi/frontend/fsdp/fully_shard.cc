#include "magi/frontend/fsdp/fully_shard.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"

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

}  // namespace magi
