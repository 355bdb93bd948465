// compare_checkpoints: bitwise comparison of two FSDP checkpoints (LibTorch archives that
// FsdpTrainer::SaveCheckpoint writes), for deterministic mode (docs/deterministic.md).
// magi-tensors-v1 dumps are compared by `magi compare` (no LibTorch).
//
//   bazel run //magi/training:compare_checkpoints -- /tmp/run1/checkpoint /tmp/run2/checkpoint
//   bazel run //magi/training:compare_checkpoints -- /tmp/run1/checkpoint/rank0.pt /tmp/run2/checkpoint/rank0.pt
//
// Two folders: every rank<N>.pt of the first against the same file of the second (both
// must hold the same ranks). A checkpoint root (step-<N>/ folders, as FsdpTrainer
// commits them) stands for its newest committed step. Prints, per file, "identical: ..." or the first differing
// tensor and element (magi/base/tensor_diff.h). Exit status 0 when everything is
// identical, 3 when something differs, 1 when a file cannot be read, 2 on bad usage.
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "magi/base/tensor_diff.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/types.h"
#include "magi/training/checkpoint.h"
#include "magi/training/checkpoint_files.h"

namespace magi {
namespace {

// The dtype's name as CompareTensors takes it (magi/base/tensor_diff.h: real types only).
absl::StatusOr<std::string> DTypeName(at::ScalarType type) {
  absl::StatusOr<DType> dtype = compat::FromScalarType(type);
  if (!dtype.ok() || *dtype == DType::kComplex32 || *dtype == DType::kComplex64 || *dtype == DType::kComplex128 ||
      *dtype == DType::kUInt64) {
    return absl::InvalidArgumentError(absl::StrCat("no comparison for ", c10::toString(type), " tensors"));
  }
  return std::string(TorchDTypeName(*dtype));
}

// Compares one pair of archives; 0 identical, 3 different, 1 unreadable.
int CompareFiles(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> loaded;
  std::vector<std::vector<RawTensor>> raw(2);
  for (const std::string& path : {a, b}) {
    absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> tensors = ReadArchiveTensors(path);
    if (!tensors.ok()) {
      std::fprintf(stderr, "compare_checkpoints: %s\n", std::string(tensors.status().message()).c_str());
      return 1;
    }
    loaded.push_back(*std::move(tensors));
  }
  for (int side = 0; side < 2; ++side) {
    for (const auto& [name, tensor] : loaded[side]) {
      absl::StatusOr<std::string> dtype = DTypeName(tensor.scalar_type());
      if (!dtype.ok()) {
        std::fprintf(stderr, "compare_checkpoints: %s: %s: %s\n", (side == 0 ? a : b).c_str(), name.c_str(),
                     std::string(dtype.status().message()).c_str());
        return 1;
      }
      raw[side].push_back({name, *dtype, tensor.sizes().vec(),
                           absl::string_view(static_cast<const char*>(tensor.data_ptr()),
                                             static_cast<size_t>(tensor.numel() * tensor.element_size()))});
    }
  }
  TensorDiff diff = CompareTensors(raw[0], raw[1], a, b);
  std::printf("%s vs %s: %s\n", a.c_str(), b.c_str(), diff.report.c_str());
  return diff.identical ? 0 : 3;
}

// The rank<N>.pt files of `dir`, sorted.
std::set<std::string> RankFiles(const std::string& dir) {
  std::set<std::string> names;
  static const std::regex kRankFile("rank[0-9]+\\.pt");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, kRankFile)) names.insert(name);
  }
  return names;
}

int CompareFolders(const std::string& a, const std::string& b);

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: compare_checkpoints A B   (two rank<N>.pt files, or two checkpoint folders)\n");
    return 2;
  }
  const std::string a = argv[1], b = argv[2];
  std::error_code error;
  const bool a_dir = std::filesystem::is_directory(a, error), b_dir = std::filesystem::is_directory(b, error);
  if (a_dir != b_dir) {
    std::fprintf(stderr, "compare_checkpoints: give two files or two folders\n");
    return 2;
  }
  if (!a_dir) return CompareFiles(a, b);
  std::string step_dir[2];
  for (int side = 0; side < 2; ++side) {
    const std::string& dir = side == 0 ? a : b;
    step_dir[side] = dir;
    if (!RankFiles(dir).empty()) continue;
    absl::StatusOr<std::optional<CommittedStep>> newest = FindNewestCommittedStep(dir);
    if (!newest.ok()) {
      std::fprintf(stderr, "compare_checkpoints: %s\n", std::string(newest.status().message()).c_str());
      return 1;
    }
    if (newest->has_value()) step_dir[side] = (*newest)->dir;
  }
  return CompareFolders(step_dir[0], step_dir[1]);
}

int CompareFolders(const std::string& a, const std::string& b) {
  std::set<std::string> ranks_a = RankFiles(a), ranks_b = RankFiles(b);
  if (ranks_a.empty() || ranks_a != ranks_b) {
    std::fprintf(stderr, "compare_checkpoints: %s has %zu rank<N>.pt files and %s %zu; they must hold the same ranks\n",
                 a.c_str(), ranks_a.size(), b.c_str(), ranks_b.size());
    return 1;
  }
  int worst = 0;
  for (const std::string& name : ranks_a) {
    int code = CompareFiles(a + "/" + name, b + "/" + name);
    if (code == 1) return 1;
    worst = std::max(worst, code);
  }
  return worst;
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) { return magi::Main(argc, argv); }
