// ChooseTokens: greedy, the top_k restriction, the distribution a draw follows, and that a
// row's draw depends on its logits, stream and index only (not on the other rows).
#include "magi/generation/sampling.h"

#include <torch/torch.h>

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace magi {
namespace {

at::Tensor Longs(std::vector<int64_t> values) { return torch::tensor(values, torch::kLong); }

// Token of one row drawn with index `draw` from stream `stream`.
int64_t Draw(const at::Tensor& logits, const SamplingOptions& options, int64_t stream, int64_t draw) {
  return ChooseTokens(logits.unsqueeze(0), options, Longs({stream}), Longs({draw})).item<int64_t>();
}

TEST(SamplingTest, GreedyIsTheArgmaxOfEachRow) {
  at::Tensor logits = torch::tensor({{1.0f, 5.0f, 4.0f}, {3.0f, -1.0f, 2.0f}});
  at::Tensor tokens = ChooseTokens(logits, SamplingOptions(), Longs({0, 0}), Longs({0, 0}));
  EXPECT_TRUE(torch::equal(tokens, Longs({1, 0})));
}

TEST(SamplingTest, DrawsKeepToTheTopK) {
  at::Tensor logits = torch::tensor({1.0f, 5.0f, 4.0f, -2.0f, 4.5f});
  SamplingOptions options;
  options.temperature = 100;  // nearly uniform over what top_k leaves
  options.top_k = 3;
  std::set<int64_t> drawn;
  for (int i = 0; i < 200; ++i) drawn.insert(Draw(logits, options, SamplingStreamKey(0, 0), i));
  EXPECT_EQ(drawn, (std::set<int64_t>{1, 2, 4}));
  options.temperature = 1e-300;  // no overflow: as greedy
  EXPECT_EQ(Draw(logits, options, SamplingStreamKey(0, 0), 0), 1);
  options.temperature = 1;
  options.top_k = 1;  // only the best is left
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Draw(logits, options, SamplingStreamKey(5, 2), i), 1);
}

// softmax([0, log 3]) = [1/4, 3/4]: over 4,000 draws token 1 comes 3,000 times give or take
// 27 (one standard deviation); the bound is 4.4 of them. The draws are a fixed function of
// their indices, so this cannot flake.
TEST(SamplingTest, DrawsFollowTheSoftmax) {
  const int draws = 4000;
  at::Tensor logits = torch::tensor({{0.0, std::log(3.0)}}, torch::kDouble).expand({draws, 2});
  SamplingOptions options;
  options.temperature = 1;
  at::Tensor tokens = ChooseTokens(logits, options, at::full({draws}, SamplingStreamKey(7, 0), torch::kLong),
                                   torch::arange(draws, torch::kLong));
  const double ones = tokens.sum().item<double>() / draws;
  EXPECT_NEAR(ones, 0.75, 0.03);
  // At temperature 2 the odds are sqrt(3) : 1.
  options.temperature = 2;
  tokens = ChooseTokens(logits, options, at::full({draws}, SamplingStreamKey(7, 0), torch::kLong),
                        torch::arange(draws, torch::kLong));
  EXPECT_NEAR(tokens.sum().item<double>() / draws, std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.03);
}

TEST(SamplingTest, ARowsDrawDependsOnItsStreamAndIndexNotOnTheBatch) {
  torch::manual_seed(0);
  at::Tensor logits = torch::randn({6, 256});
  SamplingOptions options;
  options.temperature = 1.5;
  options.top_k = 40;
  at::Tensor streams = Longs({SamplingStreamKey(1, 0), SamplingStreamKey(1, 1), SamplingStreamKey(1, 2),
                              SamplingStreamKey(1, 3), SamplingStreamKey(1, 4), SamplingStreamKey(1, 5)});
  at::Tensor indices = Longs({0, 1, 2, 3, 4, 5});
  at::Tensor batched = ChooseTokens(logits, options, streams, indices);
  for (int64_t r = 0; r < 6; ++r) {
    EXPECT_EQ(Draw(logits[r], options, streams[r].item<int64_t>(), r), batched[r].item<int64_t>()) << "row " << r;
  }
  // Another stream or index draws anew: over 100 draws of a flat row, nearly all differ.
  at::Tensor flat = torch::zeros({100, 256});
  at::Tensor a = ChooseTokens(flat, options, at::full({100}, SamplingStreamKey(1, 0), torch::kLong),
                              torch::arange(100, torch::kLong));
  at::Tensor b = ChooseTokens(flat, options, at::full({100}, SamplingStreamKey(1, 1), torch::kLong),
                              torch::arange(100, torch::kLong));
  EXPECT_GT(a.ne(b).sum().item<int64_t>(), 90);
  EXPECT_GT(std::set<int64_t>(a.data_ptr<int64_t>(), a.data_ptr<int64_t>() + 100).size(), 60u);
}

TEST(SamplingTest, StreamKeysAre32BitsAndDistinct) {
  std::set<int64_t> keys;
  for (int64_t seed : std::vector<int64_t>{0, 1, -1, int64_t{1} << 40}) {
    for (int64_t prompt = 0; prompt < 64; ++prompt) {
      const int64_t key = SamplingStreamKey(seed, prompt);
      EXPECT_GE(key, 0);
      EXPECT_LT(key, 1LL << 32);
      keys.insert(key);
    }
  }
  EXPECT_EQ(keys.size(), 4u * 64u);
}

TEST(SamplingTest, BadOptionsAreRefusedNamingTheFlag) {
  SamplingOptions nan;
  nan.temperature = std::nan("");
  EXPECT_EQ(ValidateSampling(nan, 256).message(), "--temperature must be a finite number >= 0 (0: greedy), not nan");
  SamplingOptions negative;
  negative.temperature = -0.5;
  EXPECT_EQ(ValidateSampling(negative, 256).message(),
            "--temperature must be a finite number >= 0 (0: greedy), not -0.5");
  SamplingOptions infinite;
  infinite.temperature = HUGE_VAL;
  EXPECT_EQ(ValidateSampling(infinite, 256).code(), absl::StatusCode::kInvalidArgument);
  SamplingOptions k;
  k.top_k = -1;
  EXPECT_EQ(ValidateSampling(k, 256).message(), "--top_k must be >= 0 (0: no limit), not -1");
  k.top_k = 300;
  EXPECT_EQ(ValidateSampling(k, 256).message(), "--top_k=300 is more than the vocabulary (256 tokens)");
}

}  // namespace
}  // namespace magi
