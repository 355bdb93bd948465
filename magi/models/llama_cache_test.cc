// LlamaImpl::ForwardWithCache (eager, fp32 CPU) against LlamaImpl::forward: a prefill is
// forward plus the cache, and decoding token by token gives the logits forward computes
// on each prefix, for sequences at different positions in one batch.
#include <torch/torch.h>

#include <iostream>

#include "gtest/gtest.h"
#include "magi/models/llama.h"

namespace magi::models {
namespace {

constexpr int64_t kWindow = 16;

Llama TinyModel() {
  torch::manual_seed(3);
  LlamaConfig config = LlamaConfig::Tiny();
  config.max_seq_len = 32;  // longer than the window: the cache length is the caller's choice
  Llama model(config);
  model->eval();
  return model;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(LlamaCacheTest, PrefillIsForwardPlusTheCache) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  at::Tensor tokens = torch::randint(0, 256, {2, kWindow}, torch::kLong);
  KvCache empty = KvCache::Zeros(model->config, 2, kWindow, torch::kFloat);
  LlamaImpl::CachedOutput prefill = model->ForwardWithCache(tokens, torch::zeros({2}, torch::kLong), empty);
  at::Tensor reference = model->forward(tokens);
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_LE(MaxDiff(prefill.logits, reference), 1e-5);  // SDPA with a mask runs another kernel than is_causal
#else
  EXPECT_TRUE(prefill.logits.equal(reference)) << "max |diff| " << MaxDiff(prefill.logits, reference);
#endif
  ASSERT_EQ(prefill.cache.keys.size(), 2u);
  EXPECT_EQ(prefill.cache.keys[0].sizes(), (std::vector<int64_t>{2, 4, kWindow, 16}));
  // Functional: the input cache is still zeros.
  EXPECT_EQ(empty.keys[1].abs().sum().item<double>(), 0.0);
  EXPECT_GT(prefill.cache.values[1].abs().sum().item<double>(), 0.0);
}

TEST(LlamaCacheTest, DecodingTokenByTokenGivesForwardOnEachPrefix) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  // Two sequences at different positions: row 0 prefilled with 3 tokens, row 1 with 7.
  at::Tensor text = torch::randint(0, 256, {2, kWindow}, torch::kLong);
  const int64_t lengths[2] = {3, 7};
  // Prefill the whole window (the tail of each row is padding the decode steps overwrite).
  at::Tensor padded = text.clone();
  padded[0].narrow(0, 3, kWindow - 3).fill_(32);
  padded[1].narrow(0, 7, kWindow - 7).fill_(32);
  LlamaImpl::CachedOutput state = model->ForwardWithCache(
      padded, torch::zeros({2}, torch::kLong), KvCache::Zeros(model->config, 2, kWindow, torch::kFloat));
  double worst = 0;
  for (int64_t step = 0; step < kWindow - 7; ++step) {
    at::Tensor positions = torch::tensor({lengths[0] + step, lengths[1] + step}, torch::kLong);
    at::Tensor next = torch::stack({text[0][lengths[0] + step], text[1][lengths[1] + step]}).view({2, 1});
    state = model->ForwardWithCache(next, positions, state.cache);
    ASSERT_EQ(state.logits.sizes(), (std::vector<int64_t>{2, 1, 256}));
    for (int r = 0; r < 2; ++r) {
      const int64_t p = lengths[r] + step;
      at::Tensor reference = model->forward(text[r].narrow(0, 0, p + 1).unsqueeze(0))[0][p];
      double diff = MaxDiff(state.logits[r][0], reference);
      worst = std::max(worst, diff);
      EXPECT_LE(diff, 2e-5) << "row " << r << " position " << p;
    }
  }
  std::cout << "decode vs forward on the prefix: max |logit diff| " << worst << std::endl;
}

TEST(LlamaCacheTest, PositionsAfterATokenDoNotMatter) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  at::Tensor tokens = torch::randint(0, 256, {1, kWindow}, torch::kLong);
  LlamaImpl::CachedOutput prefill = model->ForwardWithCache(
      tokens, torch::zeros({1}, torch::kLong), KvCache::Zeros(model->config, 1, kWindow, torch::kFloat));
  // A decode step at position 5 reads positions 0..5: overwrite 6.. with noise, same bits.
  KvCache noisy = prefill.cache;
  for (size_t l = 0; l < noisy.keys.size(); ++l) {
    noisy.keys[l] = noisy.keys[l].clone();
    noisy.values[l] = noisy.values[l].clone();
    noisy.keys[l].narrow(2, 6, kWindow - 6).normal_(0, 100);
    noisy.values[l].narrow(2, 6, kWindow - 6).normal_(0, 100);
  }
  at::Tensor next = tokens.narrow(1, 5, 1);
  at::Tensor five = torch::full({1}, 5, torch::kLong);
  LlamaImpl::CachedOutput a = model->ForwardWithCache(next, five, prefill.cache);
  LlamaImpl::CachedOutput b = model->ForwardWithCache(next, five, noisy);
  EXPECT_TRUE(a.logits.equal(b.logits));
  // The step wrote position 5 and nothing else.
  for (size_t l = 0; l < a.cache.keys.size(); ++l) {
    EXPECT_TRUE(a.cache.keys[l].narrow(2, 0, 5).equal(prefill.cache.keys[l].narrow(2, 0, 5)));
    EXPECT_TRUE(b.cache.keys[l].narrow(2, 6, kWindow - 6).equal(noisy.keys[l].narrow(2, 6, kWindow - 6)));
  }
}

}  // namespace
}  // namespace magi::models
