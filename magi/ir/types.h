// Element types, devices and value types of Magi's graph IR.
//
// A Value of the IR is an immutable SSA tensor (TypeKind::kTensor) or the pending
// result of an asynchronous collective (TypeKind::kFuture), which only magi::wait
// may consume. Shapes are static today; a dimension of kDynamicDim ("?" in text)
// keeps room for symbolic sizes later. Strides are recorded only where they
// matter (non-contiguous tensors); an empty stride list means row-major contiguous.
//
//   TensorType t{DType::kBFloat16, {8, 4096}};
//   t.ToString();                       // "bf16[8,4096]"
//   Type::Future(t).ToString();         // "future<bf16[8,4096]>"
#ifndef MAGI_IR_TYPES_H_
#define MAGI_IR_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace magi {

// Element types, named as in text IR ("f32", "bf16", ...). The order is part of the
// protobuf format: append only.
enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
  kComplex64,
  kComplex128,
  // PyTorch 2.3+ (at::kUInt64). Flash attention's philox seed and offset outputs have it, so a
  // step that runs flash attention (SDPA in deterministic mode) can be captured. Debian's
  // LibTorch 1.13 has no such scalar type: text IR and protobuf still carry it there, but
  // making a tensor of it fails with a clear error (compat::ToScalarType).
  kUInt64,
  // complex32 (torch.chalf): two f16 halves. LibTorch's CPU kernels have only part of the
  // ops for it (1.13 and 2.x: conversions, complex(), add/sub/mul/neg, cat, the scatter
  // ops, view_as_real; not sum, div, mm, exp, fft): the IR carries it everywhere, and an
  // op whose kernel lacks it fails when run, naming the node, as it does in eager PyTorch.
  kComplex32,
};

// The text name of `dtype`, e.g. "bf16".
absl::string_view DTypeName(DType dtype);
// PyTorch's name of `dtype` without "torch." ("bfloat16"), as the tensor files and checkpoint
// comparisons write it.
absl::string_view TorchDTypeName(DType dtype);
// Parses a text name; nullopt for unknown names.
std::optional<DType> ParseDType(absl::string_view name);
// Bytes per element.
int64_t DTypeSize(DType dtype);
bool IsFloatingPoint(DType dtype);

enum class DeviceType : uint8_t { kCpu, kCuda, kMeta };

// A device as LibTorch names it: "cpu", "cuda", "cuda:1", "meta".
struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = -1;  // -1: the current device of that type.

  std::string ToString() const;
  // Parses "cpu", "meta", "cuda" or "cuda:N".
  static absl::StatusOr<Device> Parse(absl::string_view text);
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

inline constexpr int64_t kDynamicDim = -1;

// The type of a dense tensor.
struct TensorType {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;    // kDynamicDim for a size not known statically.
  std::vector<int64_t> strides;  // Empty: contiguous. Otherwise one stride per dimension.
  Device device;

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  bool HasDynamicDims() const;
  // Number of elements; nullopt when a dimension is dynamic or the count does not fit
  // in int64 (the verifier rejects such types, so on verified IR nullopt means dynamic).
  std::optional<int64_t> NumElements() const;
  // Bytes of a contiguous tensor of this type; nullopt when a dimension is dynamic or
  // the byte count does not fit in int64 (as for NumElements).
  std::optional<int64_t> SizeInBytes() const;
  // SizeInBytes with the reason when there is none: FailedPrecondition for a dynamic
  // dimension, OutOfRange when the element or byte count overflows int64 (the message
  // names the type and the exact count).
  absl::StatusOr<int64_t> CheckedSizeInBytes() const;
  // True when strides are empty or equal to the row-major strides of `sizes`.
  bool IsContiguous() const;
  // Text form: dtype[sizes], then "strides[...]" when set, then "@device" unless cpu.
  std::string ToString() const;

  bool operator==(const TensorType& other) const;
  bool operator!=(const TensorType& other) const { return !(*this == other); }
};

// Row-major strides of `sizes` (a stride that would overflow int64 is clamped to
// INT64_MAX: such a type has no valid size anyway).
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes);

enum class TypeKind : uint8_t { kTensor, kFuture };

// The type of an IR value: a tensor, or a future of one (the handle an async
// collective's start returns and its wait consumes).
class Type {
 public:
  Type() = default;
  static Type Tensor(TensorType tensor) { return Type(TypeKind::kTensor, std::move(tensor)); }
  static Type Future(TensorType tensor) { return Type(TypeKind::kFuture, std::move(tensor)); }

  TypeKind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == TypeKind::kTensor; }
  bool is_future() const { return kind_ == TypeKind::kFuture; }
  // For a tensor, its type; for a future, the type of the tensor it will hold.
  const TensorType& tensor() const { return tensor_; }
  TensorType& mutable_tensor() { return tensor_; }

  std::string ToString() const;
  bool operator==(const Type& other) const { return kind_ == other.kind_ && tensor_ == other.tensor_; }
  bool operator!=(const Type& other) const { return !(*this == other); }

 private:
  Type(TypeKind kind, TensorType tensor) : kind_(kind), tensor_(std::move(tensor)) {}
  TypeKind kind_ = TypeKind::kTensor;
  TensorType tensor_;
};

}  // namespace magi

#endif  // MAGI_IR_TYPES_H_
