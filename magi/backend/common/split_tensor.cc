#include "magi/backend/common/split_tensor.h"

namespace magi {
namespace {

// 0x8000, 0x8001 and 0x7fff as int16 (the dtype the halves are handled in).
constexpr int64_t kTie = -32768;
constexpr int64_t kTieUp = -32767;
constexpr int64_t kTieDown = 32767;
constexpr int64_t kQuietNaN = 0x7fc0;

}  // namespace

std::pair<at::Tensor, at::Tensor> SplitTensorToBf16(const at::Tensor& value) {
  TORCH_CHECK(value.scalar_type() == at::kFloat, "splitting a master weight: expected float32, got ",
              value.scalar_type());
  // [n, 2] int16: column 0 the low 16 bits of each value, column 1 the high 16.
  // (Flattened first: a view to a dtype of another size needs a dimension.)
  const at::Tensor flat = value.contiguous().view({-1});
  at::Tensor halves = flat.view(at::kShort).view({-1, 2});
  at::Tensor top = halves.select(1, 1);
  at::Tensor lo = halves.select(1, 0);
  // A tie moves one ulp toward the value `hi` rounds to (split_float.h says why).
  at::Tensor odd = at::ne(at::bitwise_and(top, 1), 0);
  lo = at::where(at::eq(lo, kTie), at::where(odd, at::scalar_tensor(kTieUp, lo.options()),
                                             at::scalar_tensor(kTieDown, lo.options())),
                 lo);
  // Rounds up in magnitude when the low half is above 0x8000 (negative as int16, the tie
  // being gone); only NaN can carry into the sign bit, and NaN is replaced below.
  at::Tensor hi = at::add(top, at::lt(lo, 0).to(at::kShort));
  at::Tensor nan = at::isnan(flat);
  hi = at::where(nan, at::scalar_tensor(kQuietNaN, hi.options()), hi);
  lo = at::where(nan, at::zeros({}, lo.options()), lo);
  return {hi.contiguous().view(at::kBFloat16).view(value.sizes()), lo.contiguous().view(value.sizes())};
}

at::Tensor JoinSplitTensor(const at::Tensor& hi, const at::Tensor& lo) {
  TORCH_CHECK(hi.scalar_type() == at::kBFloat16 && lo.scalar_type() == at::kShort,
              "joining a split master weight: expected bf16 and int16 halves, got ", hi.scalar_type(), " and ",
              lo.scalar_type());
  TORCH_CHECK(hi.sizes() == lo.sizes(), "joining a split master weight: halves of sizes ", hi.sizes(), " and ",
              lo.sizes());
  at::Tensor low = lo.contiguous().view({-1});
  // The high half rounded up where the low half is above 0x8000 (unsigned): take it back.
  at::Tensor borrow = at::logical_and(at::lt(low, 0), at::ne(low, kTie)).to(at::kShort);
  at::Tensor top = at::sub(hi.contiguous().view(at::kShort).view({-1}), borrow);
  return at::stack({low, top}, 1).view(at::kFloat).view(hi.sizes());
}

}  // namespace magi
