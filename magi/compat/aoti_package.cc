#include "magi/compat/aoti_package.h"

#include <sys/stat.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/compat/torch_compat.h"

// torch::inductor::AOTIModelPackageLoader with this constructor ships with LibTorch 2.11
// and 2.12, the 2.x versions Magi builds and tests; 1.13 has no AOTInductor at all.
#if TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= 211
#define MAGI_HAS_AOTI 1
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#else
#define MAGI_HAS_AOTI 0
#endif

namespace magi::compat {

struct AotiPackage::Impl {
#if MAGI_HAS_AOTI
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
#endif
};

namespace {

// LibTorch's message without the C++ stack trace c10::Error appends.
[[maybe_unused]] std::string MessageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) return error->what_without_backtrace();
  return e.what();
}

bool SameSizes(const std::vector<int64_t>& expected, const std::vector<int64_t>& got) {
  if (expected.size() != got.size()) return false;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != kDynamicDim && expected[i] != got[i]) return false;
  }
  return true;
}

// Strides as the generated code reads them; a dimension of size 1 is never stepped over.
bool SameStrides(const TensorType& expected, const at::Tensor& got) {
  std::vector<int64_t> strides = expected.strides.empty() ? ContiguousStrides(expected.sizes) : expected.strides;
  for (int64_t d = 0; d < got.dim(); ++d) {
    if (got.size(d) != 1 && strides[d] != got.stride(d)) return false;
  }
  return true;
}

}  // namespace

bool AotInductorAvailable() { return MAGI_HAS_AOTI != 0; }

AotiPackage::AotiPackage(std::string path, AotiOptions options, std::unique_ptr<Impl> impl,
                         std::map<std::string, std::string> metadata)
    : path_(std::move(path)), options_(std::move(options)), impl_(std::move(impl)), metadata_(std::move(metadata)) {}

AotiPackage::~AotiPackage() = default;

absl::StatusOr<std::unique_ptr<AotiPackage>> AotiPackage::Load(const std::string& path, AotiOptions options) {
#if MAGI_HAS_AOTI
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat("no AOTInductor package at ", path));
  }
  auto impl = std::make_unique<Impl>();
  std::map<std::string, std::string> metadata;
  try {
    impl->loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, options.model_name, options.run_single_threaded, /*num_runners=*/1,
        static_cast<c10::DeviceIndex>(options.device_index));
    for (const auto& [key, value] : impl->loader->get_metadata()) metadata.emplace(key, value);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load AOTInductor package ", path, " (model '", options.model_name, "'): ", MessageOf(e)));
  }
  return std::unique_ptr<AotiPackage>(new AotiPackage(path, std::move(options), std::move(impl), std::move(metadata)));
#else
  (void)options;
  return absl::UnavailableError(absl::StrCat("cannot load AOTInductor package ", path, ": LibTorch ", TORCH_VERSION,
                                             " has no AOTInductor (Magi uses it from LibTorch 2.11 on; build with "
                                             "MAGI_TORCH=2.12 tools/bazel, see docs/torch2.md)"));
#endif
}

absl::Status AotiPackage::CheckInputs(const std::vector<at::Tensor>& inputs) const {
  const std::vector<TensorType>& expected = options_.input_types;
  if (expected.empty()) return absl::OkStatus();
  if (inputs.size() != expected.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": expected ", expected.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<TensorType> got = TensorTypeOf(inputs[i]);
    if (!got.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": input ", i, ": ", got.status().message()));
    const TensorType& want = expected[i];
    if (got->dtype != want.dtype || !SameSizes(want.sizes, got->sizes) || got->device.type != want.device.type ||
        !SameStrides(want, inputs[i])) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": input ", i, " is ", got->ToString(),
                                                     " but the package was compiled for ", want.ToString()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> AotiPackage::Run(const std::vector<at::Tensor>& inputs, void* stream) {
  if (absl::Status status = CheckInputs(inputs); !status.ok()) return status;
#if MAGI_HAS_AOTI
  try {
    return impl_->loader->run(inputs, stream);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("running AOTInductor package ", path_, ": ", MessageOf(e)));
  }
#else
  (void)stream;
  return absl::UnavailableError("AOTInductor is not available");  // Load never returns a package here.
#endif
}

}  // namespace magi::compat
