#include "magi/compat/torch_compat.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/jit_type.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <vector>

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
    case c10::ScalarType::ComplexHalf:
      return DType::kComplex32;
#if MAGI_TORCH_HAS_UINT64
    case c10::ScalarType::UInt64:
      return DType::kUInt64;
#endif
    default:
      return absl::UnimplementedError(absl::StrCat("dtype ", c10::toString(type), " is not supported by Magi's IR"));
  }
}

absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype) {
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
    case DType::kComplex32:
      return c10::ScalarType::ComplexHalf;
    case DType::kUInt64:
#if MAGI_TORCH_HAS_UINT64
      return c10::ScalarType::UInt64;
#else
      return absl::UnimplementedError(absl::StrCat("dtype u64 needs LibTorch 2.3 or later; this is ", kTorchVersion / 100,
                                                   ".", kTorchVersion % 100));
#endif
  }
  return absl::InternalError(absl::StrCat("unknown DType ", static_cast<int>(dtype)));
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

// LibTorch's C++ library has no Meta kernel for index_select (embedding's forward),
// embedding_dense_backward (its backward) or where.self: 1.13 has none at all, and 2.x
// registers them only from Python. Without them no model with an embedding can be captured on meta.
// They are registered here only where the running LibTorch lacks them.
at::Tensor IndexSelectMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[c10::maybe_wrap_dim(dim, self.dim())] = index.numel();
  return at::empty(sizes, self.options().device(c10::kMeta));
}

// Boxed, because the schema's num_weights is a SymInt: the gradient is [num_weights, dim].
void EmbeddingDenseBackwardMeta(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  at::Tensor grad = (*stack)[stack->size() - 5].toTensor();
  absl::StatusOr<int64_t> num_weights = ToInt((*stack)[stack->size() - 3]);
  TORCH_CHECK(num_weights.ok(), "embedding_dense_backward on meta: ", std::string(num_weights.status().message()));
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, at::empty({*num_weights, grad.size(-1)}, grad.options()));
}

// where.self has a Meta implementation only in Python on 2.x (the CPU math attention uses it).
at::Tensor WhereSelfMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  std::vector<int64_t> sizes = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  return at::empty(sizes, self.options().dtype(at::result_type(self, other)).device(c10::kMeta));
}

at::Tensor& WhereSelfOutMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                             at::Tensor& out) {
  out.resize_(at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes()));
  return out;
}

#if TORCH_VERSION_MAJOR >= 2
// The fused CUDA attention kernels, which whole-step capture records on meta for a CUDA
// step (attention.h): C++ LibTorch has no meta kernels for them (PyTorch registers those
// from Python).
using FusedAttentionOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
                                at::Tensor, at::Tensor>;

// Flash attention: what the CUDA kernel returns, in shape, dtype and layout (PyTorch's Python
// meta registration, torch/_meta_registrations.py, describes the same): the output
// in the query's layout (the kernel computes [batch, queries, heads, head_dim] and
// transposes back), the fp32 logsumexp [batch, heads, queries], no cumulative sequence
// lengths (dense batch), the rng state as uint64 [2] and an unused uint64 scalar, and an
// empty debug mask.
FusedAttentionOutputs FlashAttentionMeta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& /*value*/,
                                         double /*dropout_p*/, bool /*is_causal*/, bool return_debug_mask,
                                         std::optional<double> /*scale*/) {
  TORCH_CHECK(!return_debug_mask, "magi's meta kernel of _scaled_dot_product_flash_attention has no debug mask");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4, "_scaled_dot_product_flash_attention: 4-D query and key expected");
  const at::TensorOptions meta = query.options().device(at::kMeta);
  at::Tensor attention = at::empty_like(query);
  at::Tensor logsumexp = at::empty({query.size(0), query.size(1), query.size(2)}, meta.dtype(at::kFloat));
  at::Tensor rng_state = at::empty({2}, meta.dtype(at::kUInt64));
  at::Tensor unused = at::empty({}, meta.dtype(at::kUInt64));
  at::Tensor debug_mask = at::empty({0}, meta);
  return {attention, logsumexp, at::Tensor(), at::Tensor(), c10::SymInt(query.size(2)), c10::SymInt(key.size(2)),
          rng_state, unused, debug_mask};
}

// The gradients in the layouts of query, key and value (the CUDA kernel's, as above).
std::tuple<at::Tensor, at::Tensor, at::Tensor> FlashAttentionBackwardMeta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/,
    bool /*is_causal*/, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> /*scale*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

// cuDNN attention's output: the shape [batch, heads, queries, value head_dim] laid out in the
// query's dimension order, as the CUDA kernel allocates it (alloc_with_matching_layout in
// PyTorch's C++: dimensions filled from the smallest query stride up, ties in order).
at::Tensor LikeQueryLayout(const at::Tensor& query, at::IntArrayRef shape) {
  std::vector<int64_t> fill_order = {0, 1, 2, 3};
  std::stable_sort(fill_order.begin(), fill_order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) < query.stride(b); });
  std::vector<int64_t> strides(4);
  int64_t stride = 1;
  for (int64_t dim : fill_order) {
    strides[dim] = stride;
    stride *= shape[dim];
  }
  return at::empty_strided(shape, strides, query.options());
}

// What the CUDA kernel returns (PyTorch's Python meta registration): the output in the
// query's layout, the fp32 logsumexp [batch, heads, queries, 1] when asked for (a backward
// needs it), int64 scalar rng seed and offset, no cumulative lengths or debug mask.
FusedAttentionOutputs CudnnAttentionMeta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                         const std::optional<at::Tensor>& /*attn_bias*/, bool compute_log_sumexp,
                                         double /*dropout_p*/, bool /*is_causal*/, bool /*return_debug_mask*/,
                                         std::optional<double> /*scale*/) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "_scaled_dot_product_cudnn_attention: 4-D query, key and value expected");
  const at::TensorOptions meta = query.options().device(at::kMeta);
  at::Tensor output = LikeQueryLayout(query, {query.size(0), query.size(1), query.size(2), value.size(-1)});
  at::Tensor logsumexp = compute_log_sumexp
                             ? at::empty({query.size(0), query.size(1), query.size(2), 1}, meta.dtype(at::kFloat))
                             : at::Tensor();
  return {output,
          logsumexp,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(query.size(2)),
          c10::SymInt(key.size(2)),
          at::empty({}, meta.dtype(at::kLong)),
          at::empty({}, meta.dtype(at::kLong)),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> CudnnAttentionBackwardMeta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, const at::Tensor& /*attn_bias*/, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/,
    bool /*is_causal*/, std::optional<double> /*scale*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

#endif

bool HasMetaKernel(const char* name, const char* overload) {
  c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, overload});
  return op && op->hasKernelForDispatchKey(c10::DispatchKey::Meta);
}

const bool kMetaKernelsRegistered = [] {
  // Never destroyed: the registrations must outlive every static that runs ops.
  auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
  if (!HasMetaKernel("aten::index_select", "")) library->impl("index_select", TORCH_FN(IndexSelectMeta));
  if (!HasMetaKernel("aten::where", "self")) library->impl("where.self", TORCH_FN(WhereSelfMeta));
  if (!HasMetaKernel("aten::where", "self_out")) library->impl("where.self_out", TORCH_FN(WhereSelfOutMeta));
  if (!HasMetaKernel("aten::embedding_dense_backward", "")) {
    library->impl("embedding_dense_backward",
                  torch::CppFunction::makeFromBoxedFunction<&EmbeddingDenseBackwardMeta>());
  }
#if TORCH_VERSION_MAJOR >= 2
  if (!HasMetaKernel("aten::_scaled_dot_product_flash_attention", "")) {
    library->impl("_scaled_dot_product_flash_attention", TORCH_FN(FlashAttentionMeta));
  }
  if (!HasMetaKernel("aten::_scaled_dot_product_flash_attention_backward", "")) {
    library->impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(FlashAttentionBackwardMeta));
  }
  if (!HasMetaKernel("aten::_scaled_dot_product_cudnn_attention", "")) {
    library->impl("_scaled_dot_product_cudnn_attention", TORCH_FN(CudnnAttentionMeta));
  }
  if (!HasMetaKernel("aten::_scaled_dot_product_cudnn_attention_backward", "")) {
    library->impl("_scaled_dot_product_cudnn_attention_backward", TORCH_FN(CudnnAttentionBackwardMeta));
  }
#endif
  return true;
}();

}  // namespace

}  // namespace magi::compat
