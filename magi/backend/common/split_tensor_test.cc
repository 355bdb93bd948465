// The ATen split and join against the host functions they implement (split_float.h), bit
// for bit, over every low half of a spread of top halves (ties, subnormals, infinities and
// NaNs among them), and the split AdamW update against AdamWReference of the joined value.
#include "magi/backend/common/split_tensor.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "magi/backend/common/split_float.h"
#include "magi/backend/common/step_plan.h"

namespace magi {
namespace {

// Every 4th low half under every 97th top half, and all low halves of the edge tops.
at::Tensor SpreadOfBitPatterns() {
  std::vector<int32_t> bits;
  std::vector<uint32_t> edge_tops = {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x3f80u, 0x7f7fu, 0x7f80u, 0x7fc0u,
                                     0x7fffu, 0x8000u, 0x8001u, 0xbf80u, 0xff7fu, 0xff80u, 0xffffu};
  for (uint32_t top = 0; top <= 0xffff; top += 97) {
    for (uint32_t lo = top % 4; lo <= 0xffff; lo += 4) bits.push_back(static_cast<int32_t>((top << 16) | lo));
  }
  for (uint32_t top : edge_tops) {
    for (uint32_t lo = 0; lo <= 0xffff; ++lo) bits.push_back(static_cast<int32_t>((top << 16) | lo));
  }
  return at::tensor(bits, at::kInt).view(at::kFloat);
}

TEST(SplitTensorTest, SplitAndJoinAreTheHostFunctionsBitForBit) {
  at::Tensor values = SpreadOfBitPatterns();
  auto [hi, lo] = SplitTensorToBf16(values);
  ASSERT_EQ(hi.scalar_type(), at::kBFloat16);
  ASSERT_EQ(lo.scalar_type(), at::kShort);
  at::Tensor joined = JoinSplitTensor(hi, lo);
  const float* x = values.data_ptr<float>();
  const uint16_t* h = static_cast<const uint16_t*>(hi.data_ptr());
  const uint16_t* l = static_cast<const uint16_t*>(lo.data_ptr());
  const float* j = joined.data_ptr<float>();
  int64_t ties = 0;
  for (int64_t i = 0; i < values.numel(); ++i) {
    const SplitFloat expected = SplitToBf16(x[i]);
    ASSERT_EQ(h[i], expected.hi) << std::hex << "bits 0x" << FloatBits(x[i]);
    ASSERT_EQ(l[i], expected.lo) << std::hex << "bits 0x" << FloatBits(x[i]);
    ASSERT_EQ(FloatBits(j[i]), FloatBits(JoinSplit(expected.hi, expected.lo))) << std::hex << "bits 0x"
                                                                               << FloatBits(x[i]);
    if ((FloatBits(x[i]) & 0xffffu) == 0x8000u) ++ties;
  }
  EXPECT_GT(ties, 15);  // the edge tops' ties are in
  // The high half is the bf16 cast, as a mixed-precision step computes it (NaN aside:
  // ATen's vectorized cast keeps other NaN bits than c10::BFloat16).
  at::Tensor numbers = values.isnan().logical_not();
  EXPECT_TRUE(at::equal(hi.view(at::kShort).masked_select(numbers),
                        values.to(at::kBFloat16).view(at::kShort).masked_select(numbers)));
}

TEST(SplitTensorTest, KeepsShapesAndHandlesScalarsAndEmptyTensors) {
  at::Tensor matrix = at::randn({3, 5});
  auto [hi, lo] = SplitTensorToBf16(matrix.t());  // not contiguous
  EXPECT_EQ(hi.sizes(), matrix.t().sizes());
  EXPECT_TRUE(at::equal(JoinSplitTensor(hi, lo), matrix.t()));
  at::Tensor scalar = at::scalar_tensor(1.25f, at::kFloat);
  auto [shi, slo] = SplitTensorToBf16(scalar);
  EXPECT_EQ(shi.dim(), 0);
  EXPECT_TRUE(at::equal(JoinSplitTensor(shi, slo), scalar));
  auto [ehi, elo] = SplitTensorToBf16(at::empty({0, 4}));
  EXPECT_EQ(JoinSplitTensor(ehi, elo).sizes(), at::IntArrayRef({0, 4}));
}

TEST(SplitTensorTest, WrongDtypesAndSizesThrowNamingThem) {
  EXPECT_THROW(SplitTensorToBf16(at::zeros({2}, at::kDouble)), c10::Error);
  EXPECT_THROW(JoinSplitTensor(at::zeros({2}, at::kFloat), at::zeros({2}, at::kShort)), c10::Error);
  EXPECT_THROW(JoinSplitTensor(at::zeros({2}, at::kBFloat16), at::zeros({3}, at::kShort)), c10::Error);
}

TEST(SplitTensorTest, SplitAdamWIsTheSplitOfTheUpdateOfTheJoinedValue) {
  at::manual_seed(3);
  const int64_t n = 4099;
  auto [hi, lo] = SplitTensorToBf16(at::randn({n}));
  at::Tensor grad = at::randn({n}), m = at::randn({n}) * 0.1, v = at::rand({n}) * 0.01;
  at::Tensor decay = at::scalar_tensor(1 - 1e-3 * 0.1, at::kFloat);
  at::Tensor step_size = at::scalar_tensor(1e-3 / (1 - 0.9), at::kFloat);
  at::Tensor bc2_sqrt = at::scalar_tensor(std::sqrt(1 - 0.999), at::kFloat);
  AdamWConstants constants;
  std::vector<at::Tensor> expected =
      AdamWReference(JoinSplitTensor(hi, lo), grad, m, v, decay, step_size, bc2_sqrt, constants);
  for (bool in_place : {false, true}) {
    at::Tensor h = hi.clone(), l = lo.clone(), m2 = m.clone(), v2 = v.clone();
    const bool all[4] = {true, true, true, true};
    std::vector<at::Tensor> got =
        AdamWSplitReference(h, l, grad, m2, v2, decay, step_size, bc2_sqrt, constants, in_place ? all : nullptr);
    ASSERT_EQ(got.size(), 4u);
    auto [want_hi, want_lo] = SplitTensorToBf16(expected[0]);
    EXPECT_TRUE(at::equal(got[0].view(at::kShort), want_hi.view(at::kShort)));
    EXPECT_TRUE(at::equal(got[1], want_lo));
    EXPECT_TRUE(at::equal(got[2], expected[1]));
    EXPECT_TRUE(at::equal(got[3], expected[2]));
    // In place: the results are the inputs' memory; else the inputs are untouched.
    EXPECT_EQ(got[0].data_ptr() == h.data_ptr(), in_place);
    EXPECT_EQ(got[1].data_ptr() == l.data_ptr(), in_place);
    EXPECT_EQ(got[2].data_ptr() == m2.data_ptr(), in_place);
    if (!in_place) EXPECT_TRUE(at::equal(h.view(at::kShort), hi.view(at::kShort)));
  }
}

}  // namespace
}  // namespace magi
