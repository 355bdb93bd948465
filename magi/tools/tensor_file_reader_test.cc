#include "magi/tools/tensor_file_reader.h"

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"
#include "magi/base/file.h"

namespace magi {
namespace {

std::string Prefix(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Writes PREFIX.json with `index` and PREFIX.bin with `bin`; returns PREFIX.
std::string Write(const std::string& name, const std::string& index, const std::string& bin) {
  std::string prefix = Prefix(name);
  EXPECT_TRUE(WriteFileAtomically(prefix + ".json", index).ok());
  EXPECT_TRUE(WriteFileAtomically(prefix + ".bin", bin).ok());
  return prefix;
}

std::string Floats(std::vector<float> values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// What examples/tensor_file.cc writes for {"w": f32[2,2], "loss": f64[]}.
constexpr char kIndex[] = R"({"format": "magi-tensors-v1", "tensors": [
  {"name": "w", "dtype": "float32", "shape": [2, 2], "offset": 0, "nbytes": 16},
  {"name": "loss", "dtype": "float64", "shape": [], "offset": 16, "nbytes": 8}
]}
)";

TEST(TensorFileReaderTest, ReadsWhatTheWriterWritesFromAnyOfItsThreeNames) {
  double loss = 2.5;
  std::string bin = Floats({1, 2, 3, 4}) + std::string(reinterpret_cast<const char*>(&loss), sizeof(loss));
  std::string prefix = Write("good", kIndex, bin);
  for (const std::string& path : {prefix, prefix + ".json", prefix + ".bin"}) {
    absl::StatusOr<std::unique_ptr<TensorFile>> file = ReadTensorFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ((*file)->tensors.size(), 2u);
    EXPECT_EQ((*file)->tensors[0].name, "w");
    EXPECT_EQ((*file)->tensors[0].shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ((*file)->tensors[0].bytes, Floats({1, 2, 3, 4}));
    EXPECT_EQ((*file)->tensors[1].dtype, "float64");
    EXPECT_TRUE((*file)->tensors[1].shape.empty());
  }
}

TEST(TensorFileReaderTest, ComparingTwoDumpsFindsTheFirstDifference) {
  double loss = 2.5;
  std::string tail(reinterpret_cast<const char*>(&loss), sizeof(loss));
  auto a = ReadTensorFile(Write("a", kIndex, Floats({1, 2, 3, 4}) + tail));
  auto b = ReadTensorFile(Write("b", kIndex, Floats({1, 2, 3.5f, 4}) + tail));
  ASSERT_TRUE(a.ok() && b.ok());
  TensorDiff diff = CompareTensors((*a)->tensors, (*b)->tensors, "a", "b");
  EXPECT_EQ(diff.report,
            "first difference: tensor 'w' (float32[2,2]) element [1,0] (flat 2): a 3 (0x40400000), b 3.5 "
            "(0x40600000); 1 of 4 elements differ\n1 of 2 tensors differ");
  EXPECT_TRUE(CompareTensors((*a)->tensors, (*a)->tensors).identical);
}

void ExpectError(const std::string& name, const std::string& index, const std::string& bin,
                 const std::string& message) {
  std::string prefix = Write(name, index, bin);
  absl::StatusOr<std::unique_ptr<TensorFile>> file = ReadTensorFile(prefix);
  ASSERT_FALSE(file.ok()) << name;
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file.status().message(), prefix + ".json" + message);
}

TEST(TensorFileReaderTest, BadIndexesAreRefusedNamingTheFileAndTensor) {
  std::string bin = Floats({1, 2, 3, 4, 5, 6});
  ExpectError("format", R"({"format": "other", "tensors": []})", bin,
              ": not a magi-tensors-v1 index (\"format\" must be \"magi-tensors-v1\")");
  ExpectError("nbytes",
              R"({"format": "magi-tensors-v1", "tensors": [{"name": "w", "dtype": "float32", "shape": [2, 2],
              "offset": 0, "nbytes": 12}]})",
              bin, ": tensor 'w' has nbytes 12, not 16 (4 elements of float32)");
  ExpectError("past_end",
              R"({"format": "magi-tensors-v1", "tensors": [{"name": "w", "dtype": "float32", "shape": [4],
              "offset": 16, "nbytes": 16}]})",
              bin, ": tensor 'w' ends at byte 16 + 16, past the end of " + Prefix("past_end") + ".bin (24 bytes)");
  ExpectError("overlap",
              R"({"format": "magi-tensors-v1", "tensors": [
                {"name": "a", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8},
                {"name": "b", "dtype": "float32", "shape": [2], "offset": 4, "nbytes": 8}]})",
              bin, ": two tensors overlap at bytes 4..8");
  ExpectError("twice",
              R"({"format": "magi-tensors-v1", "tensors": [
                {"name": "a", "dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4},
                {"name": "a", "dtype": "float32", "shape": [1], "offset": 4, "nbytes": 4}]})",
              bin, ": tensor 'a' appears twice");
  ExpectError("dtype",
              R"({"format": "magi-tensors-v1", "tensors": [{"name": "a", "dtype": "complex64", "shape": [1],
              "offset": 0, "nbytes": 8}]})",
              bin, ": tensor 'a' has no known \"dtype\" (float32, float64, bfloat16, float16, int64, int32)");
  ExpectError("syntax", R"({"format": "magi-tensors-v1", "tensors": [)", bin, ":1:43: unexpected end of JSON");
}

TEST(TensorFileReaderTest, AMissingFileIsNotFound) {
  EXPECT_EQ(ReadTensorFile(Prefix("nothing_here")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace magi
