#include "examples/tensor_file.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/types.h"

namespace magi {
namespace {

// The dtype's name in a magi-tensors-v1 file, which carries the real types PyTorch's
// readers of it load (benchmarks/pytorch/tensor_file.py, magi/tools/tensor_file_reader.cc).
absl::StatusOr<std::string> DTypeName(at::ScalarType type) {
  absl::StatusOr<DType> dtype = compat::FromScalarType(type);
  if (!dtype.ok() || !(*dtype == DType::kFloat32 || *dtype == DType::kFloat64 || *dtype == DType::kBFloat16 ||
                       *dtype == DType::kFloat16 || *dtype == DType::kInt64 || *dtype == DType::kInt32)) {
    return absl::InvalidArgumentError(absl::StrCat("magi-tensors-v1 has no dtype for ", c10::toString(type)));
  }
  return std::string(TorchDTypeName(*dtype));
}

}  // namespace

absl::Status WriteTensorFile(const std::string& prefix,
                             const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  MAGI_ASSIGN_OR_RETURN(AtomicFileWriter bin, AtomicFileWriter::Open(prefix + ".bin"));
  std::string json = "{\"format\": \"magi-tensors-v1\", \"tensors\": [";
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    MAGI_ASSIGN_OR_RETURN(std::string dtype, DTypeName(tensor.scalar_type()));
    at::Tensor host = tensor.detach().to(at::kCPU).contiguous();
    int64_t nbytes = static_cast<int64_t>(host.numel() * host.element_size());
    MAGI_RETURN_IF_ERROR(bin.Append(absl::string_view(static_cast<const char*>(host.data_ptr()), nbytes)));
    std::string shape;
    for (int64_t d = 0; d < host.dim(); ++d) absl::StrAppend(&shape, d == 0 ? "" : ", ", host.size(d));
    absl::StrAppendFormat(&json, "%s\n  {\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [%s], \"offset\": %d, "
                                 "\"nbytes\": %d}",
                          i == 0 ? "" : ",", name, dtype, shape, offset, nbytes);
    offset += nbytes;
  }
  absl::StrAppend(&json, "\n]}\n");
  MAGI_RETURN_IF_ERROR(bin.Commit());
  return WriteFileAtomically(prefix + ".json", json);
}

}  // namespace magi
