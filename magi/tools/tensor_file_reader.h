// Reads "magi-tensors-v1" files without LibTorch, for `magi compare`.
//
// A file is PREFIX.json (the index: {"format": "magi-tensors-v1", "tensors": [{"name",
// "dtype", "shape", "offset", "nbytes"}, ...]}) + PREFIX.bin (raw little-endian,
// C-contiguous bytes); examples/tensor_file.h writes them, benchmarks/pytorch/
// tensor_file.py reads and writes them from Python.
//
//   absl::StatusOr<std::unique_ptr<TensorFile>> file = ReadTensorFile("/tmp/run1/losses");
//   for (const RawTensor& t : (*file)->tensors) ...   // t.bytes points into the file's buffer
//
// The whole index is validated before any data is used, as the Python reader does: the
// format tag, every entry's fields and their types, a known dtype, a non-negative shape,
// nbytes == elements * element size, offset + nbytes within PREFIX.bin, unique names,
// no overlapping byte ranges. Errors are InvalidArgument naming the file and the tensor
// (NotFound when a file is missing).
#ifndef MAGI_TOOLS_TENSOR_FILE_READER_H_
#define MAGI_TOOLS_TENSOR_FILE_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/base/tensor_diff.h"

namespace magi {

struct TensorFile {
  std::string json_path;
  std::string bin;                  // PREFIX.bin's bytes
  std::vector<RawTensor> tensors;  // in index order; bytes are views into `bin`
};

// True for the dtype names magi-tensors-v1 carries.
bool IsTensorFileDType(const std::string& dtype);

// Reads PREFIX.json and PREFIX.bin; `path` may be PREFIX, PREFIX.json or PREFIX.bin.
absl::StatusOr<std::unique_ptr<TensorFile>> ReadTensorFile(const std::string& path);

}  // namespace magi

#endif  // MAGI_TOOLS_TENSOR_FILE_READER_H_
