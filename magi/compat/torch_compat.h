// The one place where Magi adapts to LibTorch version differences (1.13 and 2.x).
//
// Everything here is small and stateless: which dispatch key capture uses, how a
// schema argument is classified (SymInt folds into int), how int-like IValues read
// (2.x boxes SymInt), and conversions between LibTorch's and Magi's dtypes, devices
// and tensor types. Meta kernels that LibTorch's C++ library lacks (aten::index_select
// and aten::embedding_dense_backward, used by embeddings) are registered by this
// library's static initializer where missing (alwayslink).
#ifndef MAGI_COMPAT_TORCH_COMPAT_H_
#define MAGI_COMPAT_TORCH_COMPAT_H_

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DispatchKey.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/types.h"

namespace magi::compat {

// 100 * major + minor, e.g. 113 for 1.13, 211 for 2.11.
inline constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;

// c10::ScalarType::UInt64 (and UInt16/UInt32) appeared in PyTorch 2.3.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define MAGI_TORCH_HAS_UINT64 1
#else
#define MAGI_TORCH_HAS_UINT64 0
#endif

// The dispatch key whose boxed fallback records ops during capture. It is a
// functionality key above Autograd that no LibTorch library registers a fallback for
// (in 1.13 and 2.x): the capture frontend owns it while a capture runs.
inline constexpr c10::DispatchKey kCaptureKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// How a schema argument is passed, with optional-ness split off.
enum class ArgKind {
  kTensor,
  kTensorList,
  kOptionalTensorList,  // Tensor?[]
  kInt,                 // int and SymInt
  kFloat,
  kBool,
  kString,
  kScalar,
  kScalarType,
  kLayout,
  kMemoryFormat,
  kDevice,
  kIntList,  // int[] and SymInt[]
  kFloatList,
  kBoolList,
  kGenerator,
  kUnsupported,
};

struct ArgType {
  ArgKind kind = ArgKind::kUnsupported;
  bool optional = false;
};

ArgType ClassifyType(const c10::TypePtr& type);
inline ArgType ClassifyArgument(const c10::Argument& argument) { return ClassifyType(argument.real_type()); }

// Int-like IValues (int, and SymInt on 2.x); ToInt/ToIntList fail on symbolic values.
bool IsIntLike(const c10::IValue& value);
absl::StatusOr<int64_t> ToInt(const c10::IValue& value);
absl::StatusOr<std::vector<int64_t>> ToIntList(const c10::IValue& value);

absl::StatusOr<DType> FromScalarType(c10::ScalarType type);
// Fails for a DType this LibTorch cannot represent (u64 before 2.3).
absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype);
absl::StatusOr<Device> FromTorchDevice(const c10::Device& device);
c10::Device ToTorchDevice(const Device& device);

// The IR type of `tensor` (strides recorded only when not contiguous). `device_override`
// replaces the tensor's device when set (meta capture of a model that runs on cpu/cuda).
absl::StatusOr<TensorType> TensorTypeOf(const at::Tensor& tensor, const Device* device_override = nullptr);

// True if the op, called on tensors whose highest backend key is in `keys`, runs a
// CompositeImplicitAutograd kernel at the Autograd key, i.e. autograd decomposes it
// into other ops instead of differentiating it as one.
bool DecomposesAtAutograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys);

// "aten::add.Tensor" for an operator name.
std::string OpNameOf(const c10::OperatorName& name);

}  // namespace magi::compat

#endif  // MAGI_COMPAT_TORCH_COMPAT_H_
