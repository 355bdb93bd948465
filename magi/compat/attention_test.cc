// compat::CausalAttention: the fused at::scaled_dot_product_attention on LibTorch 2.x
// (2.11, 2.12), matmul + masked softmax on 1.13; both must compute causal attention.
#include "magi/compat/attention.h"

#include <ATen/record_function.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace magi::compat {
namespace {

std::set<std::string>* recorded = nullptr;

std::unique_ptr<at::ObserverContext> Record(const at::RecordFunction& fn) {
  if (recorded != nullptr) recorded->insert(fn.name());
  return nullptr;
}

// The ATen ops a call of `fn` runs on this thread (RecordFunction, on 1.13 and 2.x).
template <typename Fn>
std::set<std::string> OpsOf(Fn fn) {
  std::set<std::string> ops;
  recorded = &ops;
  at::CallbackHandle handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&Record));
  fn();
  at::removeCallback(handle);
  recorded = nullptr;
  return ops;
}

// Causal attention written out, in double precision.
at::Tensor Reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  int64_t seq = q.size(-2);
  at::Tensor scores = at::matmul(qd, kd.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor future = at::ones({seq, seq}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), vd);
}

TEST(CausalAttentionTest, MatchesTheDefinition) {
  at::manual_seed(0);
  at::Tensor q = at::randn({2, 3, 7, 8}), k = at::randn({2, 3, 7, 8}), v = at::randn({2, 3, 7, 8});
  at::Tensor out;
  std::set<std::string> ops = OpsOf([&] { out = CausalAttention(q, k, v); });
  double diff = (out.to(at::kDouble) - Reference(q, k, v)).abs().max().item<double>();
  std::cout << "CausalAttention on LibTorch " << TORCH_VERSION << ": max |diff| vs definition " << diff << "; ran";
  for (const std::string& op : ops) std::cout << " " << op;
  std::cout << std::endl;
  EXPECT_LE(diff, 1e-6);
  // The first row attends to itself only.
  EXPECT_TRUE(at::allclose(out.select(2, 0), v.select(2, 0), 1e-6, 1e-6));
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_EQ(ops.count("aten::scaled_dot_product_attention"), 1u);  // 2.x: the fused op
#else
  EXPECT_EQ(ops.count("aten::softmax"), 1u);  // 1.13 has no SDPA
#endif
}

}  // namespace
}  // namespace magi::compat
