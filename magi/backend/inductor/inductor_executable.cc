#include "magi/backend/inductor/inductor_executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "magi/compat/torch_compat.h"

namespace magi::inductor {
namespace {

std::vector<int64_t> StridesOf(const TensorType& type) {
  return type.strides.empty() ? ContiguousStrides(type.sizes) : type.strides;
}

// The generated code indexes with the compiled strides; a dimension of size 1 is never
// stepped over (compat::AotiPackage checks the same way).
bool HasStrides(const at::Tensor& tensor, const std::vector<int64_t>& strides) {
  if (tensor.dim() != static_cast<int64_t>(strides.size())) return false;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.size(d) != 1 && tensor.stride(d) != strides[d]) return false;
  }
  return true;
}

// `tensor`'s values in a tensor of `strides`, which may overlap (stride 0 of an expanded
// tensor: copy_ refuses to write there, so every element goes to its storage offset; the
// elements that share one hold equal values in a tensor that was expanded).
at::Tensor Restride(const at::Tensor& tensor, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t storage = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) storage = 0;
    if (storage > 0) storage += (sizes[d] - 1) * strides[d];
  }
  at::Tensor base = at::empty({storage}, tensor.options());
  at::Tensor offsets = at::arange(std::max<int64_t>(storage, 1), tensor.options().dtype(at::kLong))
                           .as_strided(sizes, strides)
                           .reshape({-1});
  base.index_put_({offsets}, tensor.reshape({-1}));
  return base.as_strided(sizes, strides);
}

}  // namespace

InductorExecutable::InductorExecutable(std::unique_ptr<compat::AotiPackage> package,
                                       std::vector<TensorType> input_types, std::vector<std::string> input_names,
                                       std::vector<int> updated_inputs, PackageInfo info)
    : package_(std::move(package)),
      input_types_(std::move(input_types)),
      input_names_(std::move(input_names)),
      updated_inputs_(std::move(updated_inputs)),
      returned_outputs_(static_cast<int>(std::count(updated_inputs_.begin(), updated_inputs_.end(), -1))),
      info_(std::move(info)) {}

std::string InductorExecutable::code_key() const {
  absl::string_view name = info_.package_path;
  if (size_t slash = name.rfind('/'); slash != absl::string_view::npos) name.remove_prefix(slash + 1);
  absl::ConsumeSuffix(&name, ".pt2");
  return std::string(name);
}

absl::StatusOr<std::vector<at::Tensor>> InductorExecutable::Run(const std::vector<at::Tensor>& inputs) {
  auto start = std::chrono::steady_clock::now();
  if (inputs.size() != input_types_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("@", info_.graph, " (inductor): expected ", input_types_.size(),
                                                   " inputs, got ", inputs.size()));
  }
  std::vector<at::Tensor> arguments = inputs;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const TensorType& want = input_types_[i];
    const at::Tensor& got = arguments[i];
    absl::StatusOr<c10::ScalarType> want_scalar_type = compat::ToScalarType(want.dtype);
    if (!got.defined() || !want_scalar_type.ok() || got.scalar_type() != *want_scalar_type ||
        !std::equal(got.sizes().begin(), got.sizes().end(), want.sizes.begin(), want.sizes.end())) {
      absl::StatusOr<TensorType> actual = compat::TensorTypeOf(got);
      return absl::InvalidArgumentError(absl::StrCat(
          "@", info_.graph, " (inductor): input %", input_names_[i], " is ",
          actual.ok() ? actual->ToString() : std::string("undefined"), " but the package was compiled for ",
          want.ToString()));
    }
    std::vector<int64_t> strides = StridesOf(want);
    if (!HasStrides(got, strides) &&
        std::find(updated_inputs_.begin(), updated_inputs_.end(), static_cast<int>(i)) != updated_inputs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "@", info_.graph, " (inductor): input %", input_names_[i], " arrives with strides [",
          absl::StrJoin(got.strides(), ","), "], the package was compiled for [", absl::StrJoin(strides, ","),
          "] and updates it in place, which a copy into those strides would lose"));
    }
    if (!HasStrides(got, strides)) {
      if (!warned_restride_) {
        warned_restride_ = true;
        std::fprintf(stderr,
                     "magi: inductor: @%s: input %%%s arrives with strides [%s], the package was compiled for [%s]; "
                     "it is copied on every run\n",
                     info_.graph.c_str(), input_names_[i].c_str(), absl::StrJoin(got.strides(), ",").c_str(),
                     absl::StrJoin(strides, ",").c_str());
      }
      arguments[i] = Restride(got, want.sizes, strides);
      ++restrided_inputs_;
    }
  }
  absl::StatusOr<std::vector<at::Tensor>> outputs = package_->Run(arguments);
  if (!outputs.ok()) {
    return absl::Status(outputs.status().code(), absl::StrCat("@", info_.graph, " (inductor): ", outputs.status().message()));
  }
  if (static_cast<int>(outputs->size()) != returned_outputs_) {
    return absl::InternalError(absl::StrCat("@", info_.graph, " (inductor): the package returned ", outputs->size(),
                                            " tensors, the partition has ", returned_outputs_,
                                            " outputs it does not write in place"));
  }
  if (returned_outputs_ != static_cast<int>(updated_inputs_.size())) {
    std::vector<at::Tensor> all;
    all.reserve(updated_inputs_.size());
    size_t next = 0;
    for (int input : updated_inputs_) all.push_back(input < 0 ? std::move((*outputs)[next++]) : arguments[input]);
    *outputs = std::move(all);
  }
  stats_.nodes_run = info_.num_ops;
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.host_seconds = stats_.seconds;
  return outputs;
}

absl::Status InductorExecutable::BindCommunicator(const std::string& group, std::shared_ptr<Communicator>) {
  return absl::FailedPreconditionError(
      absl::StrCat("the inductor backend runs no collectives (group ", group, "): they stay with the primary backend"));
}

}  // namespace magi::inductor
