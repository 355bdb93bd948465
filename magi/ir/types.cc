#include "magi/ir/types.h"

#include <array>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/base/checked_math.h"

namespace magi {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  absl::string_view torch_name;
  int64_t size;
  bool floating_point;
};

constexpr std::array<DTypeInfo, 14> kDTypes = {{
    {DType::kFloat32, "f32", "float32", 4, true},
    {DType::kFloat64, "f64", "float64", 8, true},
    {DType::kFloat16, "f16", "float16", 2, true},
    {DType::kBFloat16, "bf16", "bfloat16", 2, true},
    {DType::kInt64, "i64", "int64", 8, false},
    {DType::kInt32, "i32", "int32", 4, false},
    {DType::kInt16, "i16", "int16", 2, false},
    {DType::kInt8, "i8", "int8", 1, false},
    {DType::kUInt8, "u8", "uint8", 1, false},
    {DType::kBool, "bool", "bool", 1, false},
    {DType::kComplex64, "c64", "complex64", 8, false},
    {DType::kComplex128, "c128", "complex128", 16, false},
    {DType::kUInt64, "u64", "uint64", 8, false},
    {DType::kComplex32, "c32", "complex32", 4, false},
}};

static_assert(kDTypes.back().dtype == DType::kComplex32, "one row per DType, in the enum's order");

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

absl::string_view DTypeName(DType dtype) { return Info(dtype).name; }

absl::string_view TorchDTypeName(DType dtype) { return Info(dtype).torch_name; }

std::optional<DType> ParseDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) { return Info(dtype).size; }

bool IsFloatingPoint(DType dtype) { return Info(dtype).floating_point; }

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kMeta:
      return "meta";
    case DeviceType::kCuda:
      return index < 0 ? "cuda" : absl::StrCat("cuda:", index);
  }
  return "cpu";
}

absl::StatusOr<Device> Device::Parse(absl::string_view text) {
  if (text == "cpu") return Device{DeviceType::kCpu, -1};
  if (text == "meta") return Device{DeviceType::kMeta, -1};
  if (text == "cuda") return Device{DeviceType::kCuda, -1};
  constexpr absl::string_view kCudaPrefix = "cuda:";
  if (text.substr(0, kCudaPrefix.size()) == kCudaPrefix) {
    int index = 0;
    if (absl::SimpleAtoi(text.substr(kCudaPrefix.size()), &index) && index >= 0 && index < (1 << 16)) {
      return Device{DeviceType::kCuda, index};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "' (expected cpu, meta, cuda or cuda:N)"));
}

bool TensorType::HasDynamicDims() const {
  for (int64_t size : sizes) {
    if (size == kDynamicDim) return true;
  }
  return false;
}

std::optional<int64_t> TensorType::NumElements() const {
  if (HasDynamicDims()) return std::nullopt;
  int64_t n = 1;
  for (int64_t size : sizes) {
    std::optional<int64_t> product = CheckedMul(n, size);
    if (!product) return std::nullopt;
    n = *product;
  }
  return n;
}

std::optional<int64_t> TensorType::SizeInBytes() const {
  std::optional<int64_t> n = NumElements();
  if (!n) return std::nullopt;
  return CheckedMul(*n, DTypeSize(dtype));
}

absl::StatusOr<int64_t> TensorType::CheckedSizeInBytes() const {
  if (HasDynamicDims()) return absl::FailedPreconditionError(absl::StrCat(ToString(), " has a dynamic size"));
  std::optional<int64_t> elements = NumElements();
  if (!elements) {
    return absl::OutOfRangeError(absl::StrCat(ToString(), " has more elements than int64 can count (at most ",
                                              std::numeric_limits<int64_t>::max(), ")"));
  }
  std::optional<int64_t> bytes = SizeInBytes();
  if (!bytes) {
    absl::uint128 exact = absl::uint128(static_cast<uint64_t>(*elements)) * static_cast<uint64_t>(DTypeSize(dtype));
    std::ostringstream exact_text;  // absl::StrCat takes no uint128 in this Abseil
    exact_text << exact;
    return absl::OutOfRangeError(absl::StrCat(ToString(), " is ", exact_text.str(), " bytes, more than int64 can hold (at most ",
                                              std::numeric_limits<int64_t>::max(), ")"));
  }
  return *bytes;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride = CheckedMul(stride, sizes[i] > 0 ? sizes[i] : 1).value_or(std::numeric_limits<int64_t>::max());
  }
  return strides;
}

bool TensorType::IsContiguous() const { return strides.empty() || strides == ContiguousStrides(sizes); }

namespace {

std::string JoinDims(const std::vector<int64_t>& dims) {
  return absl::StrJoin(dims, ",", [](std::string* out, int64_t d) {
    if (d == kDynamicDim) {
      out->append("?");
    } else {
      absl::StrAppend(out, d);
    }
  });
}

}  // namespace

std::string TensorType::ToString() const {
  std::string text = absl::StrCat(DTypeName(dtype), "[", JoinDims(sizes), "]");
  if (!strides.empty()) absl::StrAppend(&text, "strides[", absl::StrJoin(strides, ","), "]");
  if (device.type != DeviceType::kCpu) absl::StrAppend(&text, "@", device.ToString());
  return text;
}

bool TensorType::operator==(const TensorType& other) const {
  return dtype == other.dtype && sizes == other.sizes && strides == other.strides && device == other.device;
}

std::string Type::ToString() const {
  if (is_future()) return absl::StrCat("future<", tensor_.ToString(), ">");
  return tensor_.ToString();
}

}  // namespace magi
