#include "magi/frontend/fsdp/materialize.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_status.h"
#include "magi/module_api/reset_parameters.h"

namespace magi {
namespace {

// Seeds the default CPU generator for a scope and restores its state afterwards.
class SeededGenerator {
 public:
  explicit SeededGenerator(uint64_t seed) : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    saved_ = generator_.get_state();
    generator_.set_current_seed(seed);
  }
  ~SeededGenerator() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(saved_);
  }

 private:
  at::Generator generator_;
  at::Tensor saved_;
};

std::string Qualified(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

bool IsOnMeta(torch::nn::Module& root) {
  for (const at::Tensor& p : root.parameters()) {
    if (p.is_meta()) return true;
  }
  for (const at::Tensor& b : root.buffers()) {
    if (b.is_meta()) return true;
  }
  return false;
}

at::Tensor ShardRowsOf(const at::Tensor& full, int64_t world, int64_t rank) {
  const int64_t dim0 = full.size(0);
  const int64_t rows = ShardRows(dim0, world);
  const int64_t first = std::min(dim0, rank * rows);
  const int64_t count = std::min(dim0, first + rows) - first;
  at::Tensor mine = full.detach().narrow(0, first, count).to(at::kFloat);
  if (count == rows) return mine.clone();  // clone: never a view of `full`
  std::vector<int64_t> pad(2 * full.dim(), 0);
  pad.back() = rows - count;
  return at::constant_pad_nd(mine, pad, 0);
}

absl::StatusOr<MaterializedShards> MaterializeShards(torch::nn::Module& root, const FsdpPlan& plan,
                                                     int64_t shard_rank, uint64_t seed) {
  std::set<std::string> planned;
  for (const FsdpGroupPlan& group : plan.groups) planned.insert(group.params.begin(), group.params.end());
  MaterializedShards out;
  at::NoGradGuard no_grad;
  SeededGenerator seeded(seed);
  std::string current = "(none)";
  auto materialize = [&]() -> absl::Status {
    for (const auto& item : root.named_modules("", /*include_self=*/true)) {
      torch::nn::Module& module = *item.value();
      auto params = module.named_parameters(/*recurse=*/false);
      auto buffers = module.named_buffers(/*recurse=*/false);
      if (params.is_empty() && buffers.is_empty()) continue;
      auto* resets = dynamic_cast<ResetsParameters*>(&module);
      if (resets == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("module '", item.key(), "' (", module.name(),
                         ") has parameters or buffers but does not implement magi::ResetsParameters, so it cannot "
                         "be materialized from the meta device"));
      }
      for (const auto& param : params) {
        const std::string name = Qualified(item.key(), param.key());
        current = name;
        at::Tensor full = at::empty(param.value().sizes(), param.value().options().device(at::kCPU));
        resets->ResetParameter(param.key(), full);
        out.full_shapes[name] = full.sizes().vec();
        if (planned.count(name) != 0) out.shards[name] = ShardRowsOf(full, plan.world_size, shard_rank);
      }
      for (const auto& buffer : buffers) {
        const std::string name = Qualified(item.key(), buffer.key());
        current = name;
        at::Tensor full = at::empty(buffer.value().sizes(), buffer.value().options().device(at::kCPU));
        resets->ResetParameter(buffer.key(), full);
        out.buffers[name] = full;
      }
    }
    return absl::OkStatus();
  };
  // A failed allocation (LibTorch's, or the host's std::bad_alloc) is ResourceExhausted.
  MAGI_RETURN_IF_ERROR(compat::CallTorchWith(materialize, [&](const compat::CaughtException& caught) {
    const std::string what = absl::StrCat("materializing ", current, ": ");
    if (caught.kind == compat::CaughtException::Kind::kBadAlloc) {
      return absl::ResourceExhaustedError(absl::StrCat(what, "out of memory"));
    }
    if (caught.out_of_memory()) return absl::ResourceExhaustedError(absl::StrCat(what, caught.message));
    return absl::InternalError(absl::StrCat(what, caught.message));
  }));
  for (const std::string& name : planned) {
    if (out.shards.count(name) == 0) {
      return absl::NotFoundError(absl::StrCat("the FSDP plan names parameter ", name, ", which the module lacks"));
    }
  }
  return out;
}

}  // namespace magi
