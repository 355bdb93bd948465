// "magi-tensors-v1" files: named tensors as PREFIX.json (names, dtypes, shapes, byte
// offsets) + PREFIX.bin (raw little-endian, C-contiguous bytes), readable from Python
// without LibTorch (benchmarks/pytorch/tensor_file.py reads and writes the same format).
// Used to hand the same initial weights and batches to Magi and to PyTorch FSDP2.
#ifndef MAGI_EXAMPLES_TENSOR_FILE_H_
#define MAGI_EXAMPLES_TENSOR_FILE_H_

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace magi {

// Writes `tensors` (any device; float32, float64, bfloat16, float16, int64 or int32) to
// PREFIX.bin and PREFIX.json, each atomically (the .bin first, so a .json never names
// bytes that are not there).
absl::Status WriteTensorFile(const std::string& prefix, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace magi

#endif  // MAGI_EXAMPLES_TENSOR_FILE_H_
