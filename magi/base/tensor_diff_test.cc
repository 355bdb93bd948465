#include "magi/base/tensor_diff.h"

#include <cstring>

#include "gtest/gtest.h"

namespace magi {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(TensorDiffTest, IdenticalTensorsSayIdentical) {
  std::string w = Bytes<float>({1, 2, 3, 4, 5, 6});
  std::string s = Bytes<int64_t>({7});
  std::vector<RawTensor> a = {{"w", "float32", {2, 3}, w}, {"step", "int64", {}, s}};
  TensorDiff diff = CompareTensors(a, a);
  EXPECT_TRUE(diff.identical);
  EXPECT_EQ(diff.report, "identical: 2 tensors, 0.000 MB");
}

TEST(TensorDiffTest, ReportsTheFirstDifferingElementWithItsIndexValuesAndBits) {
  std::string w1 = Bytes<float>({1, 2, 3, 4, 5, 6});
  std::string w2 = Bytes<float>({1, 2, 3, 4, 5.0000005f, 7});
  std::vector<RawTensor> a = {{"w", "float32", {2, 3}, w1}};
  std::vector<RawTensor> b = {{"w", "float32", {2, 3}, w2}};
  TensorDiff diff = CompareTensors(a, b, "run1", "run2");
  EXPECT_FALSE(diff.identical);
  EXPECT_EQ(diff.report,
            "first difference: tensor 'w' (float32[2,3]) element [1,1] (flat 4): run1 5 (0x40a00000), run2 "
            "5.00000048 (0x40a00001); 2 of 6 elements differ\n1 of 1 tensors differ");
}

TEST(TensorDiffTest, NegativeZeroIsADifferenceAndEqualNaNsAreNot) {
  std::string zero = Bytes<float>({0.0f}), negative_zero = Bytes<float>({-0.0f});
  std::string nan = Bytes<uint32_t>({0x7fc00000u});
  EXPECT_FALSE(CompareTensors({{"z", "float32", {1}, zero}}, {{"z", "float32", {1}, negative_zero}}).identical);
  EXPECT_TRUE(CompareTensors({{"n", "float32", {1}, nan}}, {{"n", "float32", {1}, nan}}).identical);
}

TEST(TensorDiffTest, MissingTensorsAndOtherShapesAreDifferences) {
  std::string w = Bytes<float>({1, 2});
  std::vector<RawTensor> a = {{"w", "float32", {2}, w}, {"v", "float32", {2}, w}};
  std::vector<RawTensor> b = {{"w", "float32", {1, 2}, w}, {"u", "float32", {2}, w}};
  TensorDiff diff = CompareTensors(a, b);
  EXPECT_EQ(diff.report,
            "first difference: tensor 'w' is float32[2] in A but float32[1,2] in B\n3 of 2 tensors differ");
}

TEST(TensorDiffTest, HalfPrecisionValuesAreShownAsNumbers) {
  std::string a = Bytes<uint16_t>({0x3f80}), b = Bytes<uint16_t>({0x3f81});  // bfloat16 1.0, 1.0078125
  TensorDiff diff = CompareTensors({{"h", "bfloat16", {1}, a}}, {{"h", "bfloat16", {1}, b}});
  EXPECT_NE(diff.report.find("A 1 (0x3f80), B 1.008 (0x3f81)"), std::string::npos) << diff.report;
  std::string c = Bytes<uint16_t>({0x3c00}), d = Bytes<uint16_t>({0x0001});  // float16 1.0, smallest subnormal
  diff = CompareTensors({{"f", "float16", {1}, c}}, {{"f", "float16", {1}, d}});
  EXPECT_NE(diff.report.find("A 1 (0x3c00), B 5.9605e-08 (0x0001)"), std::string::npos) << diff.report;
}

}  // namespace
}  // namespace magi
