#include "magi/calibration/input_synthesis.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi::calibration {
namespace {

TensorType Type(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  TensorType type;
  type.dtype = dtype;
  type.sizes = std::move(sizes);
  type.strides = std::move(strides);
  return type;
}

TEST(InputSynthesisTest, FloatsAreInHalfToOneAndIntegersBelowTheBound) {
  absl::StatusOr<at::Tensor> floats = Synthesize(Type(DType::kFloat32, {64, 32}), 7);
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_EQ(floats->scalar_type(), at::kFloat);
  EXPECT_EQ(floats->sizes().vec(), (std::vector<int64_t>{64, 32}));
  EXPECT_GE(floats->min().item<float>(), 0.5f);
  EXPECT_LT(floats->max().item<float>(), 1.0f);
  absl::StatusOr<at::Tensor> ints = Synthesize(Type(DType::kInt64, {256}), 7);
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_GE(ints->min().item<int64_t>(), 1);
  EXPECT_LT(ints->max().item<int64_t>(), 7);
  // No room for an index above 0: zeros.
  absl::StatusOr<at::Tensor> zeros = Synthesize(Type(DType::kInt64, {8}), 1);
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(zeros->abs().sum().item<int64_t>(), 0);
  absl::StatusOr<at::Tensor> bools = Synthesize(Type(DType::kBool, {8}), 7);
  ASSERT_TRUE(bools.ok()) << bools.status();
  EXPECT_FALSE(bools->any().item<bool>());
}

TEST(InputSynthesisTest, TheIrsStridesAreHonoured) {
  // A transposed [64,32] weight, and an expanded dimension (stride 0).
  absl::StatusOr<at::Tensor> transposed = Synthesize(Type(DType::kFloat32, {32, 64}, {1, 32}), 2);
  ASSERT_TRUE(transposed.ok()) << transposed.status();
  EXPECT_EQ(transposed->strides().vec(), (std::vector<int64_t>{1, 32}));
  absl::StatusOr<at::Tensor> expanded = Synthesize(Type(DType::kFloat32, {4, 16}, {0, 1}), 2);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  EXPECT_EQ(expanded->strides().vec(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(expanded->storage().nbytes(), 16 * sizeof(float));
}

TEST(InputSynthesisTest, DynamicSizesAreRefused) {
  absl::StatusOr<at::Tensor> tensor = Synthesize(Type(DType::kFloat32, {kDynamicDim, 3}), 2);
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tensor.status().message(), "f32[?,3] has dynamic sizes");
}

TEST(InputSynthesisTest, IndicesStayBelowTheSmallestFloatingDimension) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %w: f32[250,64]
    input %tokens: i64[32]
    %e = aten::embedding(%w, %tokens, -1, false, false) : f32[32,64]
    %n = aten::neg(%tokens) : i64[32]
    output e = %e
    output n = %n
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  EXPECT_EQ(IndexBound(*graph.nodes()[0]), 32);  // the embedding's result has 32 rows
  EXPECT_EQ(IndexBound(*graph.nodes()[1]), 2);   // no floating tensor: 2
  // A graph input below every consumer's bound.
  absl::StatusOr<std::vector<at::Tensor>> inputs = SynthesizeGraphInputs(graph);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 2u);
  EXPECT_LT((*inputs)[1].max().item<int64_t>(), 2);
}

TEST(InputSynthesisTest, RestoreGeneratorsPutsTheCpuGeneratorBack) {
  at::manual_seed(11);
  at::Tensor expected = at::rand({4});
  at::manual_seed(11);
  {
    RestoreGenerators restore(at::Device(at::kCPU));
    absl::StatusOr<at::Tensor> drawn = Synthesize(Type(DType::kFloat32, {1024}), 2);
    ASSERT_TRUE(drawn.ok()) << drawn.status();
  }
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

}  // namespace
}  // namespace magi::calibration
