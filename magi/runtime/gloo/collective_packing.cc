#include "magi/runtime/gloo/collective_packing.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace magi {
namespace {

const uint8_t* BytesOf(const at::Tensor& t) { return static_cast<const uint8_t*>(t.data_ptr()); }
uint8_t* MutableBytesOf(at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

// memcpy of `bytes` (an empty tensor's data pointer may be null: nothing to copy).
void Copy(uint8_t* to, const uint8_t* from, int64_t bytes) {
  if (bytes > 0) std::memcpy(to, from, static_cast<size_t>(bytes));
}

std::vector<int64_t> ScaledRows(const at::Tensor& t, int64_t numerator, int64_t denominator) {
  std::vector<int64_t> sizes = t.sizes().vec();
  if (numerator != denominator) sizes[0] = sizes[0] * numerator / denominator;
  return sizes;
}

}  // namespace

std::vector<std::vector<size_t>> GroupByDtype(const std::vector<at::Tensor>& inputs) {
  std::vector<std::vector<size_t>> groups;
  std::vector<at::ScalarType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    size_t g = 0;
    while (g < dtypes.size() && dtypes[g] != inputs[i].scalar_type()) ++g;
    if (g == dtypes.size()) {
      dtypes.push_back(inputs[i].scalar_type());
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

absl::StatusOr<at::Tensor> PackChunked(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& members,
                                       int64_t chunks, at::ScalarType buffer_dtype) {
  int64_t total_bytes = 0;
  for (size_t i : members) {
    const at::Tensor& t = inputs[i];
    if (!t.device().is_cpu()) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is not a CPU tensor"));
    if (chunks > 1 && (t.dim() == 0 || t.size(0) % chunks != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " of shape ", c10::str(t.sizes()),
                                                     " does not split into ", chunks, " equal parts along dim 0"));
    }
    total_bytes += static_cast<int64_t>(t.nbytes());
  }
  const int64_t element = static_cast<int64_t>(c10::elementSize(buffer_dtype));
  if (total_bytes % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat(total_bytes, " bytes of inputs do not fill whole ",
                                                   c10::toString(buffer_dtype), " elements"));
  }
  at::Tensor packed = at::empty({total_bytes / element}, at::TensorOptions().dtype(buffer_dtype));
  uint8_t* out = MutableBytesOf(packed);
  const int64_t chunk_bytes = total_bytes / chunks;
  int64_t offset = 0;  // within a chunk
  for (size_t i : members) {
    at::Tensor t = inputs[i].contiguous();
    const int64_t piece = static_cast<int64_t>(t.nbytes()) / chunks;
    for (int64_t r = 0; r < chunks; ++r) Copy(out + r * chunk_bytes + offset, BytesOf(t) + r * piece, piece);
    offset += piece;
  }
  return packed;
}

std::vector<at::Tensor> UnpackChunk(const at::Tensor& packed, const std::vector<at::Tensor>& inputs,
                                    const std::vector<size_t>& members, int64_t chunks, int64_t chunk) {
  const int64_t chunk_bytes = static_cast<int64_t>(packed.nbytes()) / chunks;
  const uint8_t* in = BytesOf(packed) + chunk * chunk_bytes;
  std::vector<at::Tensor> results;
  results.reserve(members.size());
  int64_t offset = 0;
  for (size_t i : members) {
    at::Tensor result = at::empty(ScaledRows(inputs[i], 1, chunks), inputs[i].options());
    Copy(MutableBytesOf(result), in + offset, static_cast<int64_t>(result.nbytes()));
    offset += static_cast<int64_t>(result.nbytes());
    results.push_back(std::move(result));
  }
  return results;
}

std::vector<at::Tensor> UnpackGathered(const at::Tensor& gathered, const std::vector<at::Tensor>& inputs,
                                       int64_t world) {
  const int64_t rank_bytes = static_cast<int64_t>(gathered.nbytes()) / world;
  std::vector<at::Tensor> results;
  results.reserve(inputs.size());
  int64_t offset = 0;
  for (const at::Tensor& input : inputs) {
    at::Tensor result = at::empty(ScaledRows(input, world, 1), input.options());
    const int64_t piece = static_cast<int64_t>(input.nbytes());
    for (int64_t r = 0; r < world; ++r) {
      Copy(MutableBytesOf(result) + r * piece, BytesOf(gathered) + r * rank_bytes + offset, piece);
    }
    offset += piece;
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace magi
