#include "magi/compat/torch_compat.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/jit_type.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"

namespace magi::compat {

ArgType ClassifyType(const c10::TypePtr& type) {
  ArgType out;
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) {
    out.optional = true;
    t = t->castRaw<c10::OptionalType>()->getElementType();
  }
  switch (t->kind()) {
    case c10::TypeKind::TensorType:
      out.kind = ArgKind::kTensor;
      break;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      out.kind = ArgKind::kInt;
      break;
    case c10::TypeKind::FloatType:
      out.kind = ArgKind::kFloat;
      break;
    case c10::TypeKind::BoolType:
      out.kind = ArgKind::kBool;
      break;
    case c10::TypeKind::StringType:
      out.kind = ArgKind::kString;
      break;
    case c10::TypeKind::NumberType:
      out.kind = ArgKind::kScalar;
      break;
    case c10::TypeKind::ScalarTypeType:
      out.kind = ArgKind::kScalarType;
      break;
    case c10::TypeKind::LayoutType:
      out.kind = ArgKind::kLayout;
      break;
    case c10::TypeKind::MemoryFormatType:
      out.kind = ArgKind::kMemoryFormat;
      break;
    case c10::TypeKind::DeviceObjType:
      out.kind = ArgKind::kDevice;
      break;
    case c10::TypeKind::GeneratorType:
      out.kind = ArgKind::kGenerator;
      break;
    case c10::TypeKind::ListType: {
      c10::TypePtr element = t->castRaw<c10::ListType>()->getElementType();
      switch (element->kind()) {
        case c10::TypeKind::TensorType:
          out.kind = ArgKind::kTensorList;
          break;
        case c10::TypeKind::OptionalType:
          if (element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
            out.kind = ArgKind::kOptionalTensorList;
          }
          break;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType:
          out.kind = ArgKind::kIntList;
          break;
        case c10::TypeKind::FloatType:
          out.kind = ArgKind::kFloatList;
          break;
        case c10::TypeKind::BoolType:
          out.kind = ArgKind::kBoolList;
          break;
        default:
          break;
      }
      break;
    }
    default:
      break;
  }
  return out;
}

bool IsIntLike(const c10::IValue& value) {
#if TORCH_VERSION_MAJOR >= 2
  if (value.isSymInt()) return true;
#endif
  return value.isInt();
}

absl::StatusOr<int64_t> ToInt(const c10::IValue& value) {
  if (value.isInt()) return value.toInt();
#if TORCH_VERSION_MAJOR >= 2
  if (value.isSymInt()) {
    c10::SymInt sym = value.toSymInt();
    if (auto concrete = sym.maybe_as_int()) return *concrete;
    return absl::UnimplementedError("symbolic sizes are not supported yet");
  }
#endif
  return absl::InvalidArgumentError(absl::StrCat("expected an int, got ", value.tagKind()));
}

absl::StatusOr<std::vector<int64_t>> ToIntList(const c10::IValue& value) {
  if (value.isIntList()) return value.toIntVector();
  if (!value.isList()) return absl::InvalidArgumentError(absl::StrCat("expected an int list, got ", value.tagKind()));
  std::vector<int64_t> out;
  for (const c10::IValue& element : value.toListRef()) {
    absl::StatusOr<int64_t> i = ToInt(element);
    if (!i.ok()) return i.status();
    out.push_back(*i);
  }
  return out;
}

absl::StatusOr<DType> FromScalarType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Double:
      return DType::kFloat64;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Long:
      return DType::kInt64;
    case c10::ScalarType::Int:
      return DType::kInt32;
    case c10::ScalarType::Short:
      return DType::kInt16;
    case c10::ScalarType::Char:
      return DType::kInt8;
    case c10::ScalarType::Byte:
      return DType::kUInt8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    case c10::ScalarType::ComplexFloat:
      return DType::kComplex64;
    case c10::ScalarType::ComplexDouble:
      return DType::kComplex128;
    default:
      return absl::UnimplementedError(absl::StrCat("dtype ", c10::toString(type), " is not supported by Magi's IR"));
  }
}

c10::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return c10::ScalarType::Float;
    case DType::kFloat64:
      return c10::ScalarType::Double;
    case DType::kFloat16:
      return c10::ScalarType::Half;
    case DType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DType::kInt64:
      return c10::ScalarType::Long;
    case DType::kInt32:
      return c10::ScalarType::Int;
    case DType::kInt16:
      return c10::ScalarType::Short;
    case DType::kInt8:
      return c10::ScalarType::Char;
    case DType::kUInt8:
      return c10::ScalarType::Byte;
    case DType::kBool:
      return c10::ScalarType::Bool;
    case DType::kComplex64:
      return c10::ScalarType::ComplexFloat;
    case DType::kComplex128:
      return c10::ScalarType::ComplexDouble;
  }
  return c10::ScalarType::Float;
}

absl::StatusOr<Device> FromTorchDevice(const c10::Device& device) {
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return Device{DeviceType::kCpu, -1};
    case c10::DeviceType::CUDA:
      return Device{DeviceType::kCuda, device.has_index() ? device.index() : -1};
    case c10::DeviceType::Meta:
      return Device{DeviceType::kMeta, -1};
    default:
      return absl::UnimplementedError(absl::StrCat("device ", device.str(), " is not supported by Magi"));
  }
}

c10::Device ToTorchDevice(const Device& device) {
  switch (device.type) {
    case DeviceType::kCpu:
      return c10::Device(c10::DeviceType::CPU);
    case DeviceType::kMeta:
      return c10::Device(c10::DeviceType::Meta);
    case DeviceType::kCuda:
      return device.index < 0 ? c10::Device(c10::DeviceType::CUDA)
                              : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device.index));
  }
  return c10::Device(c10::DeviceType::CPU);
}

absl::StatusOr<TensorType> TensorTypeOf(const at::Tensor& tensor, const Device* device_override) {
  if (!tensor.defined()) return absl::InvalidArgumentError("undefined tensor");
  if (tensor.layout() != c10::kStrided) {
    return absl::UnimplementedError(absl::StrCat("tensor layout ", c10::toString(tensor.layout()), " is not supported"));
  }
  TensorType type;
  absl::StatusOr<DType> dtype = FromScalarType(tensor.scalar_type());
  if (!dtype.ok()) return dtype.status();
  type.dtype = *dtype;
  type.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  if (!tensor.is_contiguous()) type.strides.assign(tensor.strides().begin(), tensor.strides().end());
  if (device_override != nullptr) {
    type.device = *device_override;
  } else {
    absl::StatusOr<Device> device = FromTorchDevice(tensor.device());
    if (!device.ok()) return device.status();
    type.device = *device;
  }
  return type;
}

bool DecomposesAtAutograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys) {
  // Mirrors the dispatcher's choice of kernel for the backend's Autograd key
  // (OperatorEntry::computeDispatchTableEntry): a direct registration for that key wins;
  // then CompositeImplicitAutograd, unless the backend key or CompositeExplicitAutograd
  // has its own kernel; only then the Autograd alias (which 1.13 registers for ops such
  // as linear and matmul for nested tensors, without using it on dense ones).
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return false;
  c10::DispatchKey backend = c10::highestPriorityBackendTypeId(keys);
  if (backend != c10::DispatchKey::Undefined) {
    c10::BackendComponent component = c10::toBackendComponent(backend);
    if (op.hasKernelForDispatchKey(c10::getAutogradKeyFromBackend(component))) return false;
    if (op.hasKernelForDispatchKey(backend)) return false;
  }
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) return false;
  return true;
}

std::string OpNameOf(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : absl::StrCat(name.name, ".", name.overload_name);
}

namespace {

#if TORCH_VERSION_MAJOR < 2
// LibTorch 1.13 has no Meta kernel for index_select (embedding's forward), so models
// cannot be captured on meta. Shape rule: self's sizes with dim replaced by index's numel.
at::Tensor IndexSelectMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() == 0) {
    sizes = {};
  } else {
    sizes[d] = index.numel();
  }
  return at::empty(sizes, self.options().device(c10::kMeta));
}

// embedding_dense_backward (embedding's backward) has no Meta kernel on 1.13 either. Its
// schema takes a SymInt, so the kernel is boxed: the gradient is [num_weights, dim].
void EmbeddingDenseBackwardMeta(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  at::Tensor grad = (*stack)[stack->size() - 5].toTensor();
  int64_t num_weights = (*stack)[stack->size() - 3].toInt();
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, at::empty({num_weights, grad.size(-1)}, grad.options()));
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", TORCH_FN(IndexSelectMeta));
  m.impl("embedding_dense_backward", torch::CppFunction::makeFromBoxedFunction<&EmbeddingDenseBackwardMeta>());
}
#endif

}  // namespace

}  // namespace magi::compat
