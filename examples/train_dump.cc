#include "examples/train_dump.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "examples/tensor_file.h"

namespace magi::examples {
namespace {

absl::Status CreateDir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteInitialDump(const std::string& dir, const NamedTensors& weights, int steps,
                              const std::function<std::vector<at::Tensor>(int)>& global_batch) {
  if (absl::Status created = CreateDir(dir); !created.ok()) return created;
  NamedTensors batches;
  for (int step = 0; step < steps; ++step) {
    std::vector<at::Tensor> global = global_batch(step);
    batches.emplace_back(absl::StrCat("step.", step, ".tokens"), global[0]);
    batches.emplace_back(absl::StrCat("step.", step, ".targets"), global[1]);
  }
  for (absl::Status written :
       {WriteTensorFile(dir + "/weights", weights), WriteTensorFile(dir + "/batches", batches)}) {
    if (!written.ok()) return written;
  }
  return absl::OkStatus();
}

absl::Status WriteFinalDump(const std::string& dir, const std::vector<double>& losses,
                            const NamedTensors& final_weights) {
  if (absl::Status created = CreateDir(dir); !created.ok()) return created;
  at::Tensor values = at::tensor(losses, at::TensorOptions().dtype(at::kDouble));
  for (absl::Status written : {WriteTensorFile(dir + "/losses", {{"losses", values}}),
                               WriteTensorFile(dir + "/final_weights", final_weights)}) {
    if (!written.ok()) return written;
  }
  return absl::OkStatus();
}

}  // namespace magi::examples
