#include "magi/frontend/fsdp/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {

at::Tensor ShardOf(const at::Tensor& full_param, int64_t world, int rank) {
  at::Tensor full = full_param.detach().to(at::kFloat);
  int64_t rows = ShardRows(full.size(0), world);
  std::vector<int64_t> pad(2 * full.dim(), 0);
  pad.back() = rows * world - full.size(0);
  return at::constant_pad_nd(full, pad, 0).narrow(0, rank * rows, rows).clone();
}

absl::Status SaveShardArchive(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                              int64_t step) {
  std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& [name, tensor] : tensors) archive.write(name, tensor.cpu());
    archive.write("magi.step", at::scalar_tensor(step, at::kLong));
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
  } catch (const std::exception& error) {  // LibTorch's writer throws iostream errors too (a full disk)
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write checkpoint ", path, ": ", error.what()));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename the checkpoint onto ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, at::Tensor>> LoadShardArchive(const std::string& path,
                                                                    const std::map<std::string, at::Tensor>& like,
                                                                    CheckpointExtras* extras) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& error) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, ": ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, ": ", error.what()));
  }
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
  if (extras != nullptr) {
    at::Tensor step;
    if (!archive.try_read("magi.step", step)) return absl::InvalidArgumentError(absl::StrCat(path, " has no step"));
    extras->step = step.item<int64_t>();
    extras->has_rng = archive.try_read("magi.rng.cpu", extras->cpu_rng_state);
  }
  return loaded;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadArchiveTensors(const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const std::string& key : archive.keys()) {
      at::Tensor tensor;
      if (!archive.try_read(key, tensor)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", key, "' is not a tensor"));
      }
      tensors.emplace_back(key, tensor.cpu().contiguous());
    }
    return tensors;
  } catch (const c10::Error& error) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, ": ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, ": ", error.what()));
  }
}

}  // namespace magi
