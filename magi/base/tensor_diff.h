// Bitwise comparison of two sets of named tensors given as raw bytes, for deterministic
// mode's "are these two runs identical?" (docs/deterministic.md). No LibTorch: the `magi`
// tool compares magi-tensors-v1 dumps with it, and a LibTorch binary checkpoints.
//
//   TensorDiff diff = CompareTensors(run_a, run_b);
//   std::puts(diff.report.c_str());   // "identical: 12 tensors, 3.4 MB" or the first difference
//
// Tensors are matched by name. The first difference is found in the order of `a`: a
// tensor missing from either side, a dtype or shape that differs, or the first element
// whose bytes differ, reported with its index, both values and their bit patterns, and
// how many of the tensor's elements differ. It does NOT compare within a tolerance: two
// NaNs with the same bits are equal, 0.0 and -0.0 are not.
#ifndef MAGI_BASE_TENSOR_DIFF_H_
#define MAGI_BASE_TENSOR_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace magi {

// One tensor: C-contiguous little-endian bytes (not owned) with dtype and shape.
struct RawTensor {
  std::string name;
  // "float32", "float64", "bfloat16", "float16", "int64", "int32", "int16", "int8",
  // "uint8" or "bool"; other names compare as opaque bytes.
  std::string dtype;
  std::vector<int64_t> shape;
  absl::string_view bytes;
};

// Bytes per element of `dtype` (1 for names it does not know: compared byte by byte).
int64_t DTypeSize(absl::string_view dtype);

struct TensorDiff {
  bool identical = false;
  // One paragraph: "identical: N tensors, X MB" or "first difference: ..." with the
  // count of differing tensors.
  std::string report;
};

// Compares `a` and `b` bitwise; `a_label`/`b_label` name the sides in the report.
TensorDiff CompareTensors(const std::vector<RawTensor>& a, const std::vector<RawTensor>& b,
                          absl::string_view a_label = "A", absl::string_view b_label = "B");

}  // namespace magi

#endif  // MAGI_BASE_TENSOR_DIFF_H_
