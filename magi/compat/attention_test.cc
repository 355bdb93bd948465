// compat::CausalAttention: the fused at::scaled_dot_product_attention on LibTorch 2.x
// (2.11, 2.12), matmul + masked softmax on 1.13; both must compute causal attention.
#include "magi/compat/attention.h"

#include <ATen/core/grad_mode.h>
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

// Attention under an explicit mask, in double precision.
at::Tensor MaskedReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& visible) {
  at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  at::Tensor scores = at::matmul(qd, kd.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), vd);
}

TEST(MaskedAttentionTest, MatchesTheDefinitionPerRowMask) {
  at::manual_seed(1);
  // The decode step's shape: one query per sequence over a 9-key cache, each sequence at
  // its own position (it sees keys 0..position).
  at::Tensor q = at::randn({3, 2, 1, 8}), k = at::randn({3, 2, 9, 8}), v = at::randn({3, 2, 9, 8});
  at::Tensor positions = at::tensor({0, 4, 8}, at::kLong);
  at::Tensor visible = at::arange(9, at::kLong).view({1, 1, 1, 9}) <= positions.view({3, 1, 1, 1});
  at::Tensor out;
  std::set<std::string> ops = OpsOf([&] { out = MaskedAttention(q, k, v, visible); });
  double diff = (out.to(at::kDouble) - MaskedReference(q, k, v, visible)).abs().max().item<double>();
  std::cout << "MaskedAttention: max |diff| vs definition " << diff << std::endl;
  EXPECT_LE(diff, 1e-6);
  // Position 0 sees key 0 only; garbage (large values) past a sequence's position is ignored.
  EXPECT_TRUE(at::allclose(out[0].select(1, 0), v[0].select(1, 0), 1e-6, 1e-6));
  at::Tensor k2 = k.clone(), v2 = v.clone();
  k2[1].narrow(1, 5, 4).fill_(1e4);
  v2[1].narrow(1, 5, 4).fill_(-1e4);
  EXPECT_TRUE(MaskedAttention(q, k2, v2, visible)[1].equal(out[1]));
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_EQ(ops.count("aten::scaled_dot_product_attention"), 1u);
#else
  EXPECT_EQ(ops.count("aten::softmax"), 1u);
#endif
}

TEST(MaskedAttentionTest, ACausalMaskGivesCausalAttention) {
  at::manual_seed(2);
  at::Tensor q = at::randn({2, 3, 7, 8}), k = at::randn({2, 3, 7, 8}), v = at::randn({2, 3, 7, 8});
  at::Tensor causal = at::ones({7, 7}, at::kBool).tril();
  at::Tensor masked = MaskedAttention(q, k, v, causal);
  at::Tensor reference = CausalAttention(q, k, v);
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_TRUE(at::allclose(masked, reference, 1e-6, 1e-6));  // another SDPA kernel
#else
  EXPECT_TRUE(masked.equal(reference));  // the same ops on the same values: the same bits
#endif
}

#if TORCH_VERSION_MAJOR >= 2
// A bf16 meta tensor [batch 2, heads 4, seq 16, head_dim] over [batch, seq, heads, head_dim]
// memory, as the model's q, k and v are.
at::Tensor MetaHeads(int64_t head_dim = 8) {
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kBFloat16);
  return at::empty({2, 16, 4, head_dim}, meta).transpose(1, 2).requires_grad_();
}
#endif

// On meta, attention for a CUDA step is a fused kernel (O(queries) saved for backward:
// flash without a GPU, PyTorch's choice with one), with the CUDA kernel's output layout,
// forward and backward; without a device named, PyTorch's own choice on meta (the math form).
TEST(ScopedMathAttentionTest, MaskedAttentionRunsTheMathFormInsideAndTheFusedOneAfter) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch 1.13 has no SDPA: attention is always the math form";
#endif
  at::manual_seed(3);
  const at::Tensor q = at::randn({1, 2, 1, 8}), k = at::randn({1, 2, 6, 8}), v = at::randn({1, 2, 6, 8});
  const at::Tensor mask = at::arange(6).le(3).view({1, 1, 1, 6});
  auto fused = [](const std::set<std::string>& ops) {
    for (const std::string& op : ops) {
      if (op.find("_scaled_dot_product_") != std::string::npos && op.find("math") == std::string::npos) return true;
    }
    return false;
  };
  at::Tensor inside, after;
  std::set<std::string> ops;
  {
    ScopedMathAttention math;
    ops = OpsOf([&] { inside = MaskedAttention(q, k, v, mask); });
  }
  EXPECT_FALSE(fused(ops));
  EXPECT_TRUE(fused(OpsOf([&] { after = MaskedAttention(q, k, v, mask); })));  // the flags are back
  EXPECT_TRUE(at::allclose(inside, after, 1e-5, 1e-6));
}

TEST(CausalAttentionTest, OnMetaForCudaIsAFusedKernel) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch 1.13 has no fused attention";
#else
  at::Tensor q = MetaHeads(), k = MetaHeads(), v = MetaHeads();
  at::Tensor math_out;
  std::set<std::string> math_ops = OpsOf([&] { math_out = CausalAttention(q, k, v); });
  EXPECT_EQ(math_ops.count("aten::_scaled_dot_product_flash_attention"), 0u);
  at::Tensor out;
  std::set<std::string> ops = OpsOf([&] {
    ScopedMetaAttentionDevice cuda(at::Device(at::kCUDA, 0));
    out = CausalAttention(q, k, v);
  });
  EXPECT_EQ(MetaAttentionDevice(), at::Device(at::kMeta));  // the scope ended
  // Without a GPU, flash attention; with one, what PyTorch picks there (flash or cuDNN).
  const bool cudnn = ops.count("aten::_scaled_dot_product_cudnn_attention") == 1;
  // fp32 runs no flash attention on the GPU: PyTorch's choice stays.
  std::set<std::string> fp32_ops = OpsOf([&] {
    ScopedMetaAttentionDevice cuda(at::Device(at::kCUDA, 0));
    at::Tensor q32 = at::empty({2, 4, 16, 8}, at::TensorOptions().device(at::kMeta).dtype(at::kFloat));
    CausalAttention(q32, q32, q32);
  });
  EXPECT_EQ(fp32_ops.count("aten::_scaled_dot_product_flash_attention"), 0u);
  EXPECT_EQ(ops.count("aten::_scaled_dot_product_flash_attention") + (cudnn ? 1u : 0u), 1u);
  EXPECT_EQ(out.sizes(), q.sizes());
  EXPECT_EQ(out.strides(), q.strides());
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  std::set<std::string> backward_ops = OpsOf([&] { out.sum().backward(); });
  EXPECT_EQ(backward_ops.count(cudnn ? "aten::_scaled_dot_product_cudnn_attention_backward"
                                     : "aten::_scaled_dot_product_flash_attention_backward"),
            1u);
  for (const at::Tensor& t : {q, k, v}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_EQ(t.grad().sizes(), t.sizes());
    EXPECT_EQ(t.grad().strides(), t.strides());
  }
#endif
}

// The cuDNN kernel's meta form (what the H200 runs with 2.11, registered by torch_compat.cc):
// the output in the query's dimension order, an fp32 [batch, heads, queries, 1] logsumexp
// only when asked for, and gradients like the inputs.
TEST(FusedAttentionMetaTest, CudnnAttentionForwardAndBackward) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch 1.13 has no fused attention";
#else
  at::Tensor q = MetaHeads(), k = MetaHeads(), v = MetaHeads();
  auto outputs = at::_scaled_dot_product_cudnn_attention(q, k, v, {}, /*compute_log_sumexp=*/true, 0.0, true);
  const at::Tensor& out = std::get<0>(outputs);
  EXPECT_EQ(out.sizes(), q.sizes());
  EXPECT_EQ(out.strides(), q.strides());
  EXPECT_EQ(std::get<1>(outputs).sizes(), (std::vector<int64_t>{2, 4, 16, 1}));
  EXPECT_EQ(std::get<1>(outputs).scalar_type(), at::kFloat);
  EXPECT_EQ(std::get<6>(outputs).scalar_type(), at::kLong);
  std::set<std::string> backward_ops = OpsOf([&] { out.sum().backward(); });
  EXPECT_EQ(backward_ops.count("aten::_scaled_dot_product_cudnn_attention_backward"), 1u);
  for (const at::Tensor& t : {q, k, v}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_EQ(t.grad().strides(), t.strides());
  }
  // No logsumexp unless asked for (the CUDA kernel allocates none: inference).
  at::NoGradGuard no_grad;
  auto inference = at::_scaled_dot_product_cudnn_attention(q, k, v, {}, /*compute_log_sumexp=*/false, 0.0, true);
  EXPECT_FALSE(std::get<1>(inference).defined());
  // A value head size other than the query's: the output takes the query's dimension order
  // ([batch, seq, heads, head_dim] memory here), filled from its smallest stride up.
  at::Tensor v16 = MetaHeads(16);
  at::Tensor wide = std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v16, {}, false, 0.0, true));
  EXPECT_EQ(wide.sizes(), (std::vector<int64_t>{2, 4, 16, 16}));
  EXPECT_EQ(wide.strides(), (std::vector<int64_t>{16 * 4 * 16, 16, 4 * 16, 1}));
#endif
}

}  // namespace
}  // namespace magi::compat
