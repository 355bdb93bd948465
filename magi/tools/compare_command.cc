#include "magi/tools/compare_command.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/base/tensor_diff.h"
#include "magi/tools/tensor_file_reader.h"

namespace magi {

absl::StatusOr<int> CompareTensorFiles(const std::string& a, const std::string& b) {
  std::vector<std::unique_ptr<TensorFile>> files;
  for (const std::string& path : {a, b}) {
    if (absl::EndsWith(path, ".pt")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a LibTorch archive; compare checkpoints with: bazel run //magi/training:compare_checkpoints "
                "-- A B"));
    }
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<TensorFile> file, ReadTensorFile(path));
    files.push_back(std::move(file));
  }
  TensorDiff diff = CompareTensors(files[0]->tensors, files[1]->tensors, a, b);
  std::printf("%s\n", diff.report.c_str());
  return diff.identical ? 0 : 3;
}

}  // namespace magi
