#include "magi/runtime/gloo/collective_packing.h"

#include <torch/torch.h>

#include <vector>

#include "gtest/gtest.h"

namespace magi {
namespace {

std::vector<size_t> All(const std::vector<at::Tensor>& inputs) {
  std::vector<size_t> all(inputs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

TEST(CollectivePackingTest, GroupsByDtypeInFirstAppearanceOrder) {
  std::vector<at::Tensor> inputs = {torch::zeros({2}, torch::kLong), torch::zeros({2}), torch::zeros({3}, torch::kLong),
                                    torch::zeros({1}, torch::kDouble)};
  std::vector<std::vector<size_t>> groups = GroupByDtype(inputs);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], (std::vector<size_t>{0, 2}));
  EXPECT_EQ(groups[1], (std::vector<size_t>{1}));
  EXPECT_EQ(groups[2], (std::vector<size_t>{3}));
}

// Reduce-scatter over 3 ranks: chunk r holds every input's rank-r rows, and unpacking
// chunk r gives exactly those rows, shaped like the input with a third of its rows.
TEST(CollectivePackingTest, ChunksHoldEachRanksRowsOfEveryInput) {
  at::Tensor a = torch::arange(6 * 2, torch::kFloat).reshape({6, 2});
  at::Tensor b = torch::arange(100, 103, torch::kFloat);
  at::Tensor c = torch::arange(200, 200 + 3 * 2 * 2, torch::kFloat).reshape({3, 2, 2}).transpose(1, 2);  // strided
  std::vector<at::Tensor> inputs = {a, b, c};
  absl::StatusOr<at::Tensor> packed = PackChunked(inputs, All(inputs), 3, at::kFloat);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->numel(), 12 + 3 + 12);
  EXPECT_TRUE(torch::equal(packed->narrow(0, 0, 9),
                           torch::cat({a.narrow(0, 0, 2).flatten(), b.narrow(0, 0, 1), c[0].contiguous().flatten()})));
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<at::Tensor> out = UnpackChunk(*packed, inputs, All(inputs), 3, r);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_TRUE(torch::equal(out[0], a.narrow(0, 2 * r, 2)));
    EXPECT_TRUE(torch::equal(out[1], b.narrow(0, r, 1)));
    EXPECT_TRUE(torch::equal(out[2], c.narrow(0, r, 1)));
    EXPECT_TRUE(out[2].is_contiguous());
  }
}

// All-reduce (one chunk) of a subset: the members come back whole, scalars included.
TEST(CollectivePackingTest, OneChunkRoundTripsAMemberSubset) {
  std::vector<at::Tensor> inputs = {torch::tensor(7.0, torch::kDouble), torch::ones({2}), torch::arange(4, torch::kDouble)};
  std::vector<size_t> doubles = {0, 2};
  absl::StatusOr<at::Tensor> packed = PackChunked(inputs, doubles, 1, at::kDouble);
  ASSERT_TRUE(packed.ok()) << packed.status();
  std::vector<at::Tensor> out = UnpackChunk(*packed, inputs, doubles, 1, 0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dim(), 0);
  EXPECT_TRUE(torch::equal(out[0], inputs[0]));
  EXPECT_TRUE(torch::equal(out[1], inputs[2]));
  EXPECT_NE(out[1].data_ptr(), inputs[2].data_ptr()) << "results own their storage";
}

// All-gather of mixed dtypes as bytes: the gathered buffer is the ranks' packed buffers
// one after another, and each result stacks the ranks' rows in rank order.
TEST(CollectivePackingTest, GatheredBuffersUnpackInRankOrder) {
  auto inputs_of = [](int64_t rank) {
    return std::vector<at::Tensor>{torch::full({2, 3}, rank, torch::kFloat), torch::full({1}, 10 + rank, torch::kLong)};
  };
  std::vector<at::Tensor> parts;
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<at::Tensor> inputs = inputs_of(r);
    absl::StatusOr<at::Tensor> packed = PackChunked(inputs, All(inputs), 1, at::kByte);
    ASSERT_TRUE(packed.ok()) << packed.status();
    parts.push_back(*packed);
  }
  std::vector<at::Tensor> out = UnpackGathered(torch::cat(parts), inputs_of(0), 3);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(torch::equal(out[0], torch::cat({inputs_of(0)[0], inputs_of(1)[0], inputs_of(2)[0]})));
  EXPECT_TRUE(torch::equal(out[1], torch::tensor({10, 11, 12}, torch::kLong)));
}

// Empty tensors (no data pointer to copy from) pack to nothing and come back empty.
TEST(CollectivePackingTest, EmptyTensorsRoundTrip) {
  std::vector<at::Tensor> inputs = {torch::empty({0, 4}), torch::ones({2, 2})};
  absl::StatusOr<at::Tensor> packed = PackChunked(inputs, All(inputs), 2, at::kFloat);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->numel(), 4);
  std::vector<at::Tensor> out = UnpackChunk(*packed, inputs, All(inputs), 2, 1);
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(torch::equal(out[1], torch::ones({1, 2})));
  std::vector<at::Tensor> nothing = {torch::empty({0})};
  packed = PackChunked(nothing, All(nothing), 1, at::kByte);
  ASSERT_TRUE(packed.ok()) << packed.status();
  std::vector<at::Tensor> gathered = UnpackGathered(*packed, nothing, 3);
  EXPECT_EQ(gathered[0].numel(), 0);
}

TEST(CollectivePackingTest, RowsThatDoNotSplitEvenlyAreAnErrorNamingTheInput) {
  std::vector<at::Tensor> inputs = {torch::ones({4}), torch::ones({5, 2})};
  absl::StatusOr<at::Tensor> packed = PackChunked(inputs, All(inputs), 2, at::kFloat);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(packed.status().message(), "input 1 of shape [5, 2] does not split into 2 equal parts along dim 0");
  inputs = {torch::tensor(1.0f)};
  EXPECT_FALSE(PackChunked(inputs, All(inputs), 2, at::kFloat).ok()) << "a scalar has no rows to split";
}

TEST(CollectivePackingTest, BytesThatDoNotFillTheBufferTypeAreAnError) {
  std::vector<at::Tensor> inputs = {torch::ones({3}, torch::kInt)};
  absl::StatusOr<at::Tensor> packed = PackChunked(inputs, All(inputs), 1, at::kDouble);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().message(), "12 bytes of inputs do not fill whole Double elements");
}

}  // namespace
}  // namespace magi
