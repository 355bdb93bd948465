#include "magi/analysis/op_traits.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "magi/base/check.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

enum Flag : uint16_t {
  kView = 1 << 0,
  kRandom = 1 << 1,
  kSideEffects = 1 << 2,
  kDataDependent = 1 << 3,
  kElementwise = 1 << 4,
  kCommunication = 1 << 5,
  kBackward = 1 << 6,
  kInPlace = 1 << 7,
  kUninitialized = 1 << 8,
};

struct Row {
  absl::string_view op;  // namespace::name, no overload
  uint16_t flags = 0;
  MatmulKind matmul = MatmulKind::kNone;
  int8_t matrix_operand = -1;
};

constexpr Row Matmul(absl::string_view op, uint16_t flags = 0, int8_t matrix_operand = -1) {
  return {op, flags, MatmulKind::kMatmul, matrix_operand};
}
constexpr Row Convolution(absl::string_view op, uint16_t flags = 0) {
  return {op, flags, MatmulKind::kConvolution, -1};
}
constexpr Row Attention(absl::string_view op, uint16_t flags = 0) { return {op, flags, MatmulKind::kAttention, -1}; }

// The table. One row per op; a duplicate is a programmer error (checked when the index
// is built, and by op_traits_test).
constexpr Row kRows[] = {
    // Views: the results share operand 0's storage (the memory planner allocates
    // nothing, the cost model moves no bytes). Only ops that never copy.
    {"aten::view", kView},
    {"aten::_unsafe_view", kView},
    {"aten::_reshape_alias", kView},
    {"aten::t", kView},
    {"aten::transpose", kView},
    {"aten::permute", kView},
    {"aten::expand", kView},
    {"aten::expand_as", kView},
    {"aten::slice", kView},
    {"aten::select", kView},
    {"aten::narrow", kView},
    {"aten::as_strided", kView},
    {"aten::unsqueeze", kView},
    {"aten::squeeze", kView},
    {"aten::alias", kView},
    {"aten::detach", kView},
    {"aten::diagonal", kView},
    {"aten::unfold", kView},
    {"aten::view_as", kView},
    {"aten::split", kView},
    {"aten::split_with_sizes", kView},
    {"aten::chunk", kView},
    {"aten::unbind", kView},
    {"aten::numpy_T", kView},
    {"aten::movedim", kView},
    {"aten::swapaxes", kView},
    {"aten::unflatten", kView},
    {"aten::view_as_real", kView},
    {"aten::view_as_complex", kView},

    // Random: each run draws new numbers, so two equal nodes are not the same value and
    // a recomputation would differ. In-place variants are also in place by name.
    {"aten::bernoulli", kRandom},
    {"aten::bernoulli_", kRandom},
    {"aten::binomial", kRandom},
    {"aten::dropout", kRandom},
    {"aten::dropout_", kRandom},
    {"aten::native_dropout", kRandom},
    {"aten::_fused_dropout", kRandom},
    {"aten::alpha_dropout", kRandom},
    {"aten::alpha_dropout_", kRandom},
    {"aten::feature_dropout", kRandom},
    {"aten::feature_dropout_", kRandom},
    {"aten::feature_alpha_dropout", kRandom},
    {"aten::feature_alpha_dropout_", kRandom},
    {"aten::_cudnn_init_dropout_state", kRandom},
    {"aten::rand", kRandom},
    {"aten::rand_like", kRandom},
    {"aten::randn", kRandom},
    {"aten::randn_like", kRandom},
    {"aten::randint", kRandom},
    {"aten::randint_like", kRandom},
    {"aten::randperm", kRandom},
    {"aten::random", kRandom},
    {"aten::random_", kRandom},
    {"aten::normal", kRandom},
    {"aten::normal_", kRandom},
    {"aten::normal_functional", kRandom},
    {"aten::_no_grad_normal_", kRandom},
    {"aten::log_normal", kRandom},
    {"aten::log_normal_", kRandom},
    {"aten::uniform", kRandom},
    {"aten::uniform_", kRandom},
    {"aten::_no_grad_uniform_", kRandom},
    {"aten::exponential", kRandom},
    {"aten::exponential_", kRandom},
    {"aten::cauchy", kRandom},
    {"aten::cauchy_", kRandom},
    {"aten::geometric", kRandom},
    {"aten::geometric_", kRandom},
    {"aten::multinomial", kRandom},
    {"aten::poisson", kRandom},
    {"aten::_standard_gamma", kRandom},
    {"aten::_sample_dirichlet", kRandom},
    {"aten::rrelu", kRandom},
    {"aten::rrelu_", kRandom},
    {"aten::rrelu_with_noise", kRandom},
    {"aten::rrelu_with_noise_", kRandom},
    {"prims::normal", kRandom},
    {"prims::uniform", kRandom},
    {"nvprims::rand_like", kRandom},
    {"rngprims::philox_rand", kRandom},

    // Side effects without an in-place name: batch norm in training writes its running
    // statistics inside the kernel (no alias annotation in LibTorch 1.13's schema).
    {"aten::batch_norm", kSideEffects},
    {"aten::native_batch_norm", kSideEffects},
    {"aten::_native_batch_norm_legit", kSideEffects},
    {"aten::cudnn_batch_norm", kSideEffects},
    {"aten::miopen_batch_norm", kSideEffects},
    {"aten::_batch_norm_impl_index", kSideEffects},
    // The in-place dunders (the trailing-'_' convention does not cover them).
    {"aten::__iand__", kInPlace},
    {"aten::__ior__", kInPlace},
    {"aten::__ixor__", kInPlace},
    {"aten::__ilshift__", kInPlace},
    {"aten::__irshift__", kInPlace},

    // Data-dependent: the result is a number read out of tensor data (or a shape that
    // depends on it); a static graph cannot branch on it.
    {"aten::_local_scalar_dense", kDataDependent},
    {"aten::item", kDataDependent},
    {"aten::is_nonzero", kDataDependent},
    {"aten::equal", kDataDependent},
    {"aten::allclose", kDataDependent},
    {"aten::nonzero", kDataDependent},
    {"aten::unique", kDataDependent},
    {"aten::_unique2", kDataDependent},
    {"aten::masked_select", kDataDependent},
    {"aten::_unique", kDataDependent},
    {"aten::unique_consecutive", kDataDependent},
    {"aten::unique_dim", kDataDependent},
    {"aten::argwhere", kDataDependent},
    {"aten::nonzero_numpy", kDataDependent},
    {"aten::repeat_interleave", kDataDependent},  // the output size is the sum of the repeats

    // Matrix-unit ops. addmm(bias, mat1, mat2) and friends contract operand 1.
    Matmul("aten::mm"),
    Matmul("aten::bmm"),
    Matmul("aten::matmul"),
    Matmul("aten::linear"),
    Matmul("aten::addmm", 0, 1),
    Matmul("aten::baddbmm", 0, 1),
    Matmul("aten::addbmm", 0, 1),
    Matmul("aten::linear_backward", kBackward),
    Matmul("aten::matmul_backward", kBackward),
    Convolution("aten::conv1d"),
    Convolution("aten::conv2d"),
    Convolution("aten::conv3d"),
    Convolution("aten::convolution"),
    Convolution("aten::_convolution"),
    Convolution("aten::convolution_backward", kBackward),
    // Attention kernels of LibTorch 1.13 and 2.x.
    Attention("aten::scaled_dot_product_attention"),
    Attention("aten::_scaled_dot_product_attention"),
    Attention("aten::_scaled_dot_product_attention_forward"),
    Attention("aten::_scaled_dot_product_attention_math"),
    Attention("aten::_scaled_dot_product_attention_math_for_mps"),
    Attention("aten::_flash_scaled_dot_product_attention"),
    Attention("aten::_scaled_dot_product_flash_attention"),
    Attention("aten::_scaled_dot_product_flash_attention_backward", kBackward),
    Attention("aten::_scaled_dot_product_flash_attention_for_cpu"),
    Attention("aten::_scaled_dot_product_flash_attention_for_cpu_backward", kBackward),
    Attention("aten::_scaled_dot_product_efficient_attention"),
    Attention("aten::_scaled_dot_product_efficient_attention_backward", kBackward),
    Attention("aten::_scaled_dot_product_cudnn_attention"),
    Attention("aten::_scaled_dot_product_cudnn_attention_backward", kBackward),
    Attention("aten::_scaled_dot_product_fused_attention_overrideable"),
    Attention("aten::_scaled_dot_product_fused_attention_overrideable_backward", kBackward),
    Attention("aten::_flash_attention_forward"),
    Attention("aten::_flash_attention_backward", kBackward),
    Attention("aten::_efficient_attention_forward"),
    Attention("aten::_efficient_attention_backward", kBackward),

    // Elementwise (pointwise with broadcasting), forward and backward.
    {"aten::abs", kElementwise},
    {"aten::neg", kElementwise},
    {"aten::sign", kElementwise},
    {"aten::exp", kElementwise},
    {"aten::exp2", kElementwise},
    {"aten::expm1", kElementwise},
    {"aten::log", kElementwise},
    {"aten::log2", kElementwise},
    {"aten::log1p", kElementwise},
    {"aten::sqrt", kElementwise},
    {"aten::rsqrt", kElementwise},
    {"aten::reciprocal", kElementwise},
    {"aten::sin", kElementwise},
    {"aten::cos", kElementwise},
    {"aten::tanh", kElementwise},
    {"aten::sigmoid", kElementwise},
    {"aten::erf", kElementwise},
    {"aten::relu", kElementwise},
    {"aten::gelu", kElementwise},
    {"aten::silu", kElementwise},
    {"aten::add", kElementwise},
    {"aten::sub", kElementwise},
    {"aten::rsub", kElementwise},
    {"aten::mul", kElementwise},
    {"aten::div", kElementwise},
    {"aten::pow", kElementwise},
    {"aten::maximum", kElementwise},
    {"aten::minimum", kElementwise},
    {"aten::clamp", kElementwise},
    {"aten::where", kElementwise},
    {"aten::masked_fill", kElementwise},
    {"aten::lerp", kElementwise},
    {"aten::addcmul", kElementwise},
    {"aten::addcdiv", kElementwise},
    {"aten::threshold_backward", kElementwise | kBackward},
    {"aten::gelu_backward", kElementwise | kBackward},
    {"aten::silu_backward", kElementwise | kBackward},
    {"aten::sigmoid_backward", kElementwise | kBackward},
    {"aten::tanh_backward", kElementwise | kBackward},

    // Magi's collectives (magi/ir/collectives.h).
    {kAllGatherStartOp, kCommunication},
    {kReduceScatterStartOp, kCommunication},
    {kAllReduceStartOp, kCommunication},
    {kAllToAllStartOp, kCommunication},
    {kWaitOp, kCommunication},
    // Results nobody has written (ATen's empty tensors). Deterministic mode fills these
    // where the executors run them (compat/deterministic.h), not every allocation.
    {"aten::empty", kUninitialized},
    {"aten::empty_like", kUninitialized},
    {"aten::empty_strided", kUninitialized},
    {"aten::new_empty", kUninitialized},
    {"aten::new_empty_strided", kUninitialized},
    {"aten::empty_permuted", kUninitialized},
    // This rank's rows of a tensor its group holds whole (magi/ir/magi_ops.h): a copy of
    // fresh storage, pure (it reads the rank off the group, moves nothing between ranks).
    {kLocalShardOp, 0},
};

const absl::flat_hash_map<absl::string_view, const Row*>& Index() {
  static const auto* index = [] {
    auto* map = new absl::flat_hash_map<absl::string_view, const Row*>();
    for (const Row& row : kRows) {
      MAGI_CHECK(map->emplace(row.op, &row).second) << "op " << row.op << " has two rows in the op traits table";
    }
    return map;
  }();
  return *index;
}

}  // namespace

OpNameParts SplitOpName(absl::string_view op) {
  OpNameParts parts;
  size_t colons = op.find("::");
  absl::string_view rest = op;
  if (colons != absl::string_view::npos) {
    parts.ns = op.substr(0, colons);
    rest = op.substr(colons + 2);
  }
  size_t dot = rest.find('.');
  parts.name = dot == absl::string_view::npos ? rest : rest.substr(0, dot);
  if (dot != absl::string_view::npos) parts.overload = rest.substr(dot + 1);
  return parts;
}

OpTraits GetOpTraits(absl::string_view op) {
  OpNameParts parts = SplitOpName(op);
  // namespace::name is a prefix of the op name.
  absl::string_view key = op.substr(0, static_cast<size_t>(parts.name.data() - op.data()) + parts.name.size());
  OpTraits traits;
  const auto& index = Index();
  auto it = index.find(key);
  if (it != index.end()) {
    const Row& row = *it->second;
    traits.known = true;
    traits.view = row.flags & kView;
    traits.in_place = row.flags & kInPlace;
    traits.side_effects = row.flags & kSideEffects;
    traits.random = row.flags & kRandom;
    traits.data_dependent = row.flags & kDataDependent;
    traits.elementwise = row.flags & kElementwise;
    traits.communication = row.flags & kCommunication;
    traits.backward = row.flags & kBackward;
    traits.uninitialized = row.flags & kUninitialized;
    traits.matmul = row.matmul;
    traits.matrix_operand = row.matrix_operand;
  }
  // ATen's naming conventions (see the header).
  absl::string_view name = parts.name;
  bool dunder = name.size() > 4 && absl::StartsWith(name, "__") && absl::EndsWith(name, "__");
  if (!dunder && name.size() > 1 && name.back() == '_') traits.in_place = true;
  if (parts.overload == "out" || absl::StartsWith(parts.overload, "out_")) traits.side_effects = true;
  if (traits.in_place) traits.side_effects = true;
  if (traits.view || traits.in_place) traits.alias_operand = 0;
  return traits;
}

int InPlaceOperandOfResult(absl::string_view op, int result) {
  if (op == "magi::adamw") {
    constexpr int kOperandOfResult[] = {0, 2, 3};  // p' over p, m' over m, v' over v
    return result >= 0 && result < 3 ? kOperandOfResult[result] : -1;
  }
  if (op == "magi::adamw_split") {
    constexpr int kOperandOfResult[] = {0, 1, 3, 4};  // hi' over hi, lo' over lo, m' over m, v' over v
    return result >= 0 && result < 4 ? kOperandOfResult[result] : -1;
  }
  if (op == "aten::scatter.src") return result == 0 ? 0 : -1;  // as aten::scatter_.src
  if (op == "aten::index_put") return result == 0 ? 0 : -1;      // as aten::index_put_
  return -1;
}

}  // namespace magi
