#include "examples/token_batches.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace magi::examples {
namespace {

constexpr int kSeq = 8;
constexpr int kLocal = 4;

at::Tensor Corpus() { return at::arange(0, 500, at::TensorOptions().dtype(at::kLong)).remainder(251); }

std::vector<TokenBatches> BothKinds() {
  return {TokenBatches::TextWindows(Corpus(), kSeq, /*seed=*/3),
          TokenBatches::RandomTokens(/*vocab_size=*/97, kSeq, /*seed=*/3, at::kCPU)};
}

// Every rank's rows of a step, in rank order.
std::vector<at::Tensor> ConsumedByRanks(const TokenBatches& data, int step, int world) {
  std::vector<at::Tensor> inputs, targets;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<at::Tensor> rows = data.Rows(step, world * kLocal, rank * kLocal, kLocal);
    inputs.push_back(rows[0]);
    targets.push_back(rows[1]);
  }
  return {at::cat(inputs), at::cat(targets)};
}

TEST(TokenBatchesTest, RanksReadDisjointSamplesThatMakeTheGlobalBatch) {
  for (const TokenBatches& data : BothKinds()) {
    for (int world : {1, 2, 3}) {
      std::vector<at::Tensor> whole = data.Rows(/*step=*/5, world * kLocal, 0, world * kLocal);
      std::vector<at::Tensor> by_ranks = ConsumedByRanks(data, 5, world);
      EXPECT_TRUE(at::equal(by_ranks[0], whole[0])) << "world " << world;
      EXPECT_TRUE(at::equal(by_ranks[1], whole[1])) << "world " << world;
      EXPECT_EQ(whole[0].size(0), world * kLocal);
    }
  }
}

TEST(TokenBatchesTest, TargetsAreTheInputsShiftedByOneToken) {
  TokenBatches data = TokenBatches::TextWindows(Corpus(), kSeq, 0);
  std::vector<at::Tensor> rows = data.Rows(2, 8, 0, 8);
  EXPECT_TRUE(at::equal(rows[0].narrow(1, 1, kSeq - 1), rows[1].narrow(1, 0, kSeq - 1)));
}

// A run of 2 ranks resumed on 3 (examples:train --resume at another --world_size): the
// steps after the change read a prefix of their step's draw whose first 2 * B samples are
// the ones the 2-rank run would have read; nothing depends on where the change happened.
TEST(TokenBatchesTest, AStepsFirstSamplesDoNotDependOnTheGlobalBatch) {
  for (const TokenBatches& data : BothKinds()) {
    for (int step : {0, 5, 6}) {
      std::vector<at::Tensor> on_two = ConsumedByRanks(data, step, 2);
      std::vector<at::Tensor> on_three = ConsumedByRanks(data, step, 3);
      EXPECT_TRUE(at::equal(on_three[0].narrow(0, 0, 2 * kLocal), on_two[0])) << "step " << step;
      EXPECT_TRUE(at::equal(on_three[1].narrow(0, 0, 2 * kLocal), on_two[1])) << "step " << step;
    }
  }
}

TEST(TokenBatchesTest, StepsAndSeedsDrawDifferentSamples) {
  for (const TokenBatches& data : BothKinds()) {
    EXPECT_FALSE(at::equal(data.Rows(5, 8, 0, 8)[0], data.Rows(6, 8, 0, 8)[0]));
  }
  TokenBatches other_seed = TokenBatches::TextWindows(Corpus(), kSeq, 4);
  EXPECT_FALSE(at::equal(BothKinds()[0].Rows(5, 8, 0, 8)[0], other_seed.Rows(5, 8, 0, 8)[0]));
}

}  // namespace
}  // namespace magi::examples
