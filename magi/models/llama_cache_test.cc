// LlamaImpl::ForwardWithCache (eager, fp32 CPU) against LlamaImpl::forward: a prefill is
// forward plus the cache, and decoding token by token gives the logits forward computes
// on each prefix, for sequences at different positions in one batch; with multi-head and
// with grouped-query attention (n_kv_heads < n_heads), whose parameters, cache and
// config checks are tested here too.
#include <torch/torch.h>

#include <iostream>

#include "gtest/gtest.h"
#include "magi/compat/torch_status.h"
#include "magi/models/llama.h"

namespace magi::models {
namespace {

constexpr int64_t kWindow = 16;

// Tiny: 4 heads of 16; n_kv_heads 2 is grouped-query attention (2 query heads per kv head).
Llama TinyModel(int64_t n_kv_heads = 0) {
  torch::manual_seed(3);
  LlamaConfig config = LlamaConfig::Tiny();
  config.max_seq_len = 32;  // longer than the window: the cache length is the caller's choice
  config.n_kv_heads = n_kv_heads;
  Llama model(config);
  model->eval();
  return model;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

void ExpectPrefillIsForwardPlusTheCache(Llama& model) {
  const int64_t kv_heads = model->config.kv_heads();
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
  for (const KvCache* cache : {&empty, &prefill.cache}) {
    for (size_t l = 0; l < 2; ++l) {
      EXPECT_EQ(cache->keys[l].sizes(), (std::vector<int64_t>{2, kv_heads, kWindow, 16}));
      EXPECT_EQ(cache->values[l].sizes(), (std::vector<int64_t>{2, kv_heads, kWindow, 16}));
    }
  }
  // Functional: the input cache is still zeros.
  EXPECT_EQ(empty.keys[1].abs().sum().item<double>(), 0.0);
  EXPECT_GT(prefill.cache.values[1].abs().sum().item<double>(), 0.0);
}

void ExpectDecodingTokenByTokenGivesForwardOnEachPrefix(Llama& model) {
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
  std::cout << model->config.ToString() << " decode vs forward on the prefix: max |logit diff| " << worst
            << std::endl;
}

TEST(LlamaCacheTest, PrefillIsForwardPlusTheCache) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  ExpectPrefillIsForwardPlusTheCache(model);
}

TEST(LlamaCacheTest, DecodingTokenByTokenGivesForwardOnEachPrefix) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel();
  ExpectDecodingTokenByTokenGivesForwardOnEachPrefix(model);
}

// Grouped-query attention: the cache holds the 2 kv heads, prefill and decode steps
// still give forward's logits; and multi-query attention (1 kv head) likewise.
TEST(LlamaCacheTest, GroupedQueryPrefillIsForwardPlusTheCache) {
  torch::NoGradGuard no_grad;
  for (int64_t kv_heads : {2, 1}) {
    Llama model = TinyModel(kv_heads);
    ExpectPrefillIsForwardPlusTheCache(model);
  }
}

TEST(LlamaCacheTest, GroupedQueryDecodingTokenByTokenGivesForwardOnEachPrefix) {
  torch::NoGradGuard no_grad;
  for (int64_t kv_heads : {2, 1}) {
    Llama model = TinyModel(kv_heads);
    ExpectDecodingTokenByTokenGivesForwardOnEachPrefix(model);
  }
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

// The three ways a prefill from position 0 writes the cache give the same bits: at the given
// positions (zeros), from the start whatever the positions input holds (kFromStart: a
// calibration run's synthesized positions cannot write out of bounds), and the block as the
// whole new cache (kWholeWindow).
TEST(LlamaCacheTest, PrefillWritesAreTheSameBits) {
  torch::NoGradGuard no_grad;
  Llama model = TinyModel(/*n_kv_heads=*/2);
  at::Tensor tokens = torch::randint(0, 256, {2, kWindow}, torch::kLong);
  KvCache zeros = KvCache::Zeros(model->config, 2, kWindow, torch::kFloat);
  LlamaImpl::CachedOutput positioned = model->ForwardWithCache(tokens, torch::zeros({2}, torch::kLong), zeros);
  LlamaImpl::CachedOutput from_start =
      model->ForwardWithCache(tokens, torch::full({2}, 9, torch::kLong), zeros, CacheWrite::kFromStart);
  LlamaImpl::CachedOutput whole =
      model->ForwardWithCache(tokens, torch::full({2}, 9, torch::kLong), zeros, CacheWrite::kWholeWindow);
  for (const LlamaImpl::CachedOutput* other : {&from_start, &whole}) {
    EXPECT_TRUE(other->logits.equal(positioned.logits));
    for (size_t l = 0; l < positioned.cache.keys.size(); ++l) {
      EXPECT_TRUE(other->cache.keys[l].equal(positioned.cache.keys[l]));
      EXPECT_TRUE(other->cache.values[l].equal(positioned.cache.values[l]));
    }
  }
  // A shorter block from the start leaves the positions after it as they were.
  LlamaImpl::CachedOutput half = model->ForwardWithCache(tokens.narrow(1, 0, kWindow / 2), torch::full({2}, 9, torch::kLong),
                                                         positioned.cache, CacheWrite::kFromStart);
  for (size_t l = 0; l < positioned.cache.keys.size(); ++l) {
    EXPECT_TRUE(half.cache.keys[l].narrow(2, kWindow / 2, kWindow / 2).equal(positioned.cache.keys[l].narrow(2, kWindow / 2, kWindow / 2)));
  }
}

// A GQA model is the multi-head model whose wk and wv repeat each kv head's rows for its
// group of query heads (query head h reads kv head h / 2): torch.repeat_interleave's
// order, which checkpoints converted from Hugging Face assume.
TEST(LlamaGqaTest, IsMultiHeadAttentionWithEachKvHeadRepeatedPerGroup) {
  torch::NoGradGuard no_grad;
  Llama gqa = TinyModel(2);
  Llama mha = TinyModel();
  auto mha_params = mha->named_parameters();
  for (const auto& item : gqa->named_parameters()) {
    at::Tensor weight = item.value();
    const bool kv_projection = item.key().find(".wk.") != std::string::npos || item.key().find(".wv.") != std::string::npos;
    if (kv_projection) {
      ASSERT_EQ(weight.sizes(), (std::vector<int64_t>{2 * 16, 64})) << item.key();
      weight = weight.view({2, 1, 16, 64}).expand({2, 2, 16, 64}).reshape({64, 64});
    }
    mha_params[item.key()].copy_(weight);
  }
  at::Tensor tokens = torch::randint(0, 256, {2, kWindow}, torch::kLong);
  EXPECT_LE(MaxDiff(gqa->forward(tokens), mha->forward(tokens)), 1e-5);
  LlamaImpl::CachedOutput gqa_prefill = gqa->ForwardWithCache(
      tokens, torch::zeros({2}, torch::kLong), KvCache::Zeros(gqa->config, 2, kWindow, torch::kFloat));
  LlamaImpl::CachedOutput mha_prefill = mha->ForwardWithCache(
      tokens, torch::zeros({2}, torch::kLong), KvCache::Zeros(mha->config, 2, kWindow, torch::kFloat));
  EXPECT_LE(MaxDiff(gqa_prefill.logits, mha_prefill.logits), 1e-5);
  // The cache's kv head j is the multi-head cache's heads 2j and 2j + 1.
  for (size_t l = 0; l < 2; ++l) {
    at::Tensor grouped_keys = mha_prefill.cache.keys[l].view({2, 2, 2, kWindow, 16});
    at::Tensor grouped_values = mha_prefill.cache.values[l].view({2, 2, 2, kWindow, 16});
    for (int64_t member = 0; member < 2; ++member) {
      EXPECT_LE(MaxDiff(gqa_prefill.cache.keys[l], grouped_keys.select(2, member)), 1e-5);
      EXPECT_LE(MaxDiff(gqa_prefill.cache.values[l], grouped_values.select(2, member)), 1e-5);
    }
  }
}

TEST(LlamaGqaTest, ParametersAndCount) {
  LlamaConfig config = LlamaConfig::Tiny();
  config.n_kv_heads = 2;
  Llama model(config);
  int64_t counted = 0;
  for (const at::Tensor& p : model->parameters()) counted += p.numel();
  EXPECT_EQ(config.NumParameters(), counted);
  const auto params = model->named_parameters();
  EXPECT_EQ(params["layers.0.attention.wq.weight"].sizes(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(params["layers.0.attention.wk.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(params["layers.1.attention.wv.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(params["layers.1.attention.wo.weight"].sizes(), (std::vector<int64_t>{64, 64}));
  // Per layer 2 x 64 x 64 (wq, wo) + 2 x 64 x 32 (wk, wv) + 3 x 64 x 176 + 2 x 64; two
  // untied 256 x 64 tables; the final norm.
  EXPECT_EQ(config.NumParameters(), 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 176 + 2 * 64) + 2 * 256 * 64 + 64);
  // Meta's Llama 3 8B checkpoint: 8 of 32 heads, 8,030,261,248 parameters.
  LlamaConfig llama3 = LlamaConfig::Llama3_8B();
  llama3.n_kv_heads = 8;
  EXPECT_EQ(llama3.NumParameters(), 8030261248);
  EXPECT_EQ(llama3.ToString(), "llama(vocab=128256, dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=8192)");
}

// n_kv_heads == n_heads is the multi-head model, the same parameters (names, shapes,
// values from the same seed) and the same count as n_kv_heads = 0 and as before GQA.
TEST(LlamaGqaTest, AsManyKvHeadsAsHeadsIsMultiHeadAttention) {
  LlamaConfig all = LlamaConfig::Tiny();
  all.n_kv_heads = all.n_heads;
  EXPECT_EQ(all.NumParameters(), LlamaConfig::Tiny().NumParameters());
  EXPECT_EQ(all.ToString(), LlamaConfig::Tiny().ToString());
  EXPECT_EQ(LlamaConfig::Tiny().ToString(), "llama(vocab=256, dim=64, layers=2, heads=4, ffn=176, seq=64)");
  // The count before GQA: 4 dim x dim attention matrices per layer.
  for (const LlamaConfig& preset :
       {LlamaConfig::Tiny(), LlamaConfig::Small(), LlamaConfig::Llama1B(), LlamaConfig::Llama3_8B()}) {
    EXPECT_EQ(preset.n_kv_heads, 0);
    const int64_t d = preset.dim;
    EXPECT_EQ(preset.NumParameters(), preset.vocab_size * d * (preset.tie_embeddings ? 1 : 2) +
                                          preset.n_layers * (4 * d * d + 3 * d * preset.ffn_hidden + 2 * d) + d);
  }
  torch::manual_seed(5);
  Llama with_all(all);
  torch::manual_seed(5);
  Llama with_default(LlamaConfig::Tiny());
  const auto a = with_all->named_parameters();
  const auto b = with_default->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key(), b[i].key());
    EXPECT_TRUE(a[i].value().equal(b[i].value())) << a[i].key();
  }
  torch::NoGradGuard no_grad;
  at::Tensor tokens = torch::randint(0, 256, {1, 8}, torch::kLong);
  EXPECT_TRUE(with_all->forward(tokens).equal(with_default->forward(tokens)));
}

TEST(LlamaGqaTest, BadHeadCountsAreRefused) {
  LlamaConfig config = LlamaConfig::Tiny();
  EXPECT_TRUE(config.Validate().ok());
  config.n_kv_heads = 3;  // 4 query heads do not split into 3 groups
  absl::Status status = config.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "llama config: n_kv_heads 3 must divide n_heads 4 (0 means n_heads): each key/value head serves an equal "
            "group of query heads");
  // The constructor refuses with LibTorch's error (a TORCH_CHECK).
  bool from_torch = false;
  absl::Status built = compat::CallTorchWith([&] { Llama model(config); },
                                             [&](const compat::CaughtException& caught) {
                                               from_torch = caught.from_torch();
                                               return absl::InternalError(caught.message);
                                             });
  EXPECT_TRUE(from_torch) << built;
  EXPECT_NE(built.message().find("n_kv_heads 3 must divide n_heads 4"), std::string::npos) << built;
  config.n_kv_heads = 8;
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
  config.n_kv_heads = -1;
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
  config = LlamaConfig::Tiny();
  config.n_heads = 3;  // 64 does not split into 3 heads
  EXPECT_EQ(config.Validate().message(),
            "llama config: dim 64 must split into n_heads 3 heads of even size (RoPE rotates pairs)");
  config.n_heads = 0;
  EXPECT_EQ(config.Validate().message(), "llama config: n_heads must be positive, got 0");
}

}  // namespace
}  // namespace magi::models
